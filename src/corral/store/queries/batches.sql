-- name: batch_file_insert
-- A new file's row (its chunks follow in the same transaction); it expires $6 seconds from now (null: never).
INSERT INTO batch_files (id, owner, filename, purpose, bytes, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6::double precision));

-- name: batch_file_chunk_insert
-- One chunk of a file's bytes.
INSERT INTO batch_file_chunks (file_id, seq, data) VALUES ($1, $2, $3);

-- name: batch_file_set_bytes
-- A file's size, once all its chunks are written.
UPDATE batch_files SET bytes = $2 WHERE id = $1;

-- name: batch_file_get
-- A file of the owner $2 (an expired one is gone).
SELECT id, filename, purpose, bytes, extract(epoch FROM created_at)::bigint AS created_at,
       extract(epoch FROM expires_at)::bigint AS expires_at
FROM batch_files WHERE id = $1 AND owner = $2 AND (expires_at IS NULL OR expires_at > now());

-- name: batch_files_list_asc
-- The owner's files (purpose $2 when not null), oldest first, after the file $3 (when not null), up to $4.
SELECT id, filename, purpose, bytes, extract(epoch FROM created_at)::bigint AS created_at,
       extract(epoch FROM expires_at)::bigint AS expires_at
FROM batch_files f
WHERE owner = $1 AND ($2::text IS NULL OR purpose = $2) AND (expires_at IS NULL OR expires_at > now())
  AND ($3::text IS NULL OR (created_at, id) > (SELECT created_at, id FROM batch_files WHERE id = $3 AND owner = $1))
ORDER BY created_at, id LIMIT $4;

-- name: batch_files_list_desc
-- The owner's files (purpose $2 when not null), newest first, after the file $3 (when not null), up to $4.
SELECT id, filename, purpose, bytes, extract(epoch FROM created_at)::bigint AS created_at,
       extract(epoch FROM expires_at)::bigint AS expires_at
FROM batch_files f
WHERE owner = $1 AND ($2::text IS NULL OR purpose = $2) AND (expires_at IS NULL OR expires_at > now())
  AND ($3::text IS NULL OR (created_at, id) < (SELECT created_at, id FROM batch_files WHERE id = $3 AND owner = $1))
ORDER BY created_at DESC, id DESC LIMIT $4;

-- name: batch_file_chunk
-- Chunk $2 of a file (none past its last).
SELECT data FROM batch_file_chunks WHERE file_id = $1 AND seq = $2;

-- name: batch_files_expired_delete
-- Delete up to $1 expired files (their chunks go with them); returns their ids.
DELETE FROM batch_files
WHERE id IN (SELECT id FROM batch_files WHERE expires_at <= now() ORDER BY expires_at LIMIT $1)
RETURNING id;

-- name: batch_file_delete
-- Delete a file of the owner $2 (its chunks go with it); returns its id when it was there.
DELETE FROM batch_files WHERE id = $1 AND owner = $2 RETURNING id;

-- name: batch_insert
-- A new batch, validating; it expires $8 seconds from now.
INSERT INTO batches (id, owner, tenant, key_id, endpoint, input_file_id, completion_window, metadata, expires_at,
                     output_expires_s)
VALUES ($1, $2, $3, $4, $5, $6, $7, $9, now() + make_interval(secs => $8), $10);

-- name: batch_get
-- A batch of the owner $2, as the API shows it.
SELECT id, endpoint, input_file_id, completion_window, metadata, model, status, errors, output_file_id,
       error_file_id, total, completed, failed, input_tokens, output_tokens,
       extract(epoch FROM created_at)::bigint AS created_at, extract(epoch FROM expires_at)::bigint AS expires_at,
       extract(epoch FROM in_progress_at)::bigint AS in_progress_at,
       extract(epoch FROM finalizing_at)::bigint AS finalizing_at,
       extract(epoch FROM completed_at)::bigint AS completed_at,
       extract(epoch FROM failed_at)::bigint AS failed_at, extract(epoch FROM expired_at)::bigint AS expired_at,
       extract(epoch FROM cancelling_at)::bigint AS cancelling_at,
       extract(epoch FROM cancelled_at)::bigint AS cancelled_at
FROM batches WHERE id = $1 AND owner = $2;

-- name: batches_list
-- The owner's batches, newest first, after the batch $2 (when not null), up to $3.
SELECT id, endpoint, input_file_id, completion_window, metadata, model, status, errors, output_file_id,
       error_file_id, total, completed, failed, input_tokens, output_tokens,
       extract(epoch FROM created_at)::bigint AS created_at, extract(epoch FROM expires_at)::bigint AS expires_at,
       extract(epoch FROM in_progress_at)::bigint AS in_progress_at,
       extract(epoch FROM finalizing_at)::bigint AS finalizing_at,
       extract(epoch FROM completed_at)::bigint AS completed_at,
       extract(epoch FROM failed_at)::bigint AS failed_at, extract(epoch FROM expired_at)::bigint AS expired_at,
       extract(epoch FROM cancelling_at)::bigint AS cancelling_at,
       extract(epoch FROM cancelled_at)::bigint AS cancelled_at
FROM batches
WHERE owner = $1
  AND ($2::text IS NULL OR (created_at, id) < (SELECT created_at, id FROM batches WHERE id = $2 AND owner = $1))
ORDER BY created_at DESC, id DESC LIMIT $3;

-- name: batch_cancel
-- Start cancelling a validating or running batch of the owner $2; returns its id when it was one.
UPDATE batches SET status = 'cancelling', cancelling_at = now()
WHERE id = $1 AND owner = $2 AND status IN ('validating', 'in_progress') RETURNING id;

-- name: batch_claim_validating
-- The oldest batch waiting for validation, locked for this transaction (another frontend skips it).
SELECT id, owner, endpoint, input_file_id FROM batches WHERE status = 'validating'
ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED;

-- name: batch_start
-- A validated batch: its $2 lines are pending, its model (the first line's) is $3.
UPDATE batches SET status = 'in_progress', in_progress_at = now(), total = $2, model = $3 WHERE id = $1;

-- name: batch_fail
-- A batch whose input failed validation, with the errors ($2: JSON text of OpenAI's `errors` object).
UPDATE batches SET status = 'failed', failed_at = now(), errors = $2 WHERE id = $1;

-- name: batch_lines_claim
-- Up to $2 runnable lines (pending, or running on a lapsed lease) of running batches, oldest batch first,
-- claimed by $1 for $3 seconds.
WITH picked AS (
    SELECT l.batch_id, l.line
    FROM batch_lines l JOIN batches b ON b.id = l.batch_id
    WHERE b.status = 'in_progress' AND b.expires_at > now()
      AND l.state <> 'done' AND (l.state = 'pending' OR l.lease_until < now())
    ORDER BY b.created_at, l.batch_id, l.line
    LIMIT $2
    FOR UPDATE OF l SKIP LOCKED
)
UPDATE batch_lines l
SET state = 'running', lease_owner = $1, lease_until = now() + make_interval(secs => $3)
FROM picked, batches b
WHERE l.batch_id = picked.batch_id AND l.line = picked.line AND b.id = l.batch_id
RETURNING l.batch_id, l.line, l.custom_id, l.url, l.body, b.tenant, b.key_id;

-- name: batch_lines_renew
-- Extend the leases of the lines $1 is running by $2 seconds.
UPDATE batch_lines SET lease_until = now() + make_interval(secs => $2)
WHERE lease_owner = $1 AND state = 'running';

-- name: batch_line_done
-- A finished line ($3: answered 2xx; $4: its output line), counted on its batch with its tokens ($6, $7),
-- unless its lease went to another frontend meanwhile ($5: the claimant).
WITH done AS (
    UPDATE batch_lines SET state = 'done', ok = $3, result = $4, lease_owner = NULL, lease_until = NULL
    WHERE batch_id = $1 AND line = $2 AND state = 'running' AND lease_owner = $5
    RETURNING batch_id
)
UPDATE batches
SET completed = completed + CASE WHEN $3 THEN 1 ELSE 0 END,
    failed = failed + CASE WHEN $3 THEN 0 ELSE 1 END,
    input_tokens = input_tokens + $6, output_tokens = output_tokens + $7
WHERE id IN (SELECT batch_id FROM done);

-- name: batch_claim_finishing
-- The oldest batch ready to finish, locked for this transaction: running with every line done, cancelling or
-- past its window, with no line still running on a live lease. `expired`: past its window.
SELECT id, owner, status, expires_at <= now() AS expired, output_expires_s FROM batches b
WHERE status IN ('in_progress', 'finalizing', 'cancelling')
  AND (status = 'cancelling' OR expires_at <= now()
       OR NOT EXISTS (SELECT 1 FROM batch_lines l WHERE l.batch_id = b.id AND l.state <> 'done'))
  AND NOT EXISTS (
      SELECT 1 FROM batch_lines l
      WHERE l.batch_id = b.id AND l.state = 'running' AND l.lease_until > now())
ORDER BY created_at LIMIT 1 FOR UPDATE OF b SKIP LOCKED;

-- name: batch_results
-- Up to $3 of a batch's lines after line $2, in order: done ones with their output line, the others (never run)
-- with their custom_id.
SELECT line, custom_id, state = 'done' AS done, ok, result FROM batch_lines
WHERE batch_id = $1 AND line > $2 ORDER BY line LIMIT $3;

-- name: batch_finish
-- A finished batch: its final status $2 (stamped with its time), files, and $5 lines counted failed at the end
-- (never run before the window closed); its lines go (their results are in the files).
WITH gone AS (DELETE FROM batch_lines WHERE batch_id = $1)
UPDATE batches
SET status = $2::varchar, output_file_id = $3, error_file_id = $4, failed = failed + $5,
    finalizing_at = now(),
    completed_at = CASE WHEN $2::varchar = 'completed' THEN now() END,
    expired_at = CASE WHEN $2::varchar = 'expired' THEN now() END,
    cancelled_at = CASE WHEN $2::varchar = 'cancelled' THEN now() END
WHERE id = $1;

-- name: batch_lines_release
-- The lines $1 is running, pending again (a frontend stopping: another one runs them at once).
UPDATE batch_lines SET state = 'pending', lease_owner = NULL, lease_until = NULL
WHERE lease_owner = $1 AND state = 'running';

-- name: operation_insert
-- A new activity-record row (a backend or model operation, or the parent job of a fan-out install).
INSERT INTO gallery_operations (id, parent_id, gallery_element_name, cache_key, is_backend_op, op_type, status,
    node_id, node_name, frontend_id, message, user_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
RETURNING *;

-- name: operation_delete
-- Drop a row that never became an operation (an install request that joined an intent already queued).
DELETE FROM gallery_operations WHERE id = $1 AND finished_at IS NULL;

-- name: operation_start
-- A frontend starts (or resumes) driving the operation: it is processing, no longer waiting on a busy worker.
UPDATE gallery_operations SET status = 'processing', started_at = COALESCE(started_at, now()),
    frontend_id = $2, worker_busy = false, phase = CASE WHEN phase = 'worker busy' THEN '' ELSE phase END,
    message = $3, updated_at = now()
WHERE id = $1 AND finished_at IS NULL;

-- name: operation_progress
-- A worker's progress hint (displayed only: it never finishes an operation).
UPDATE gallery_operations SET status = 'downloading', phase = $2, progress = $3, file_name = $4,
    downloaded_file_size = $5, total_file_size = $6, worker_busy = false, updated_at = now()
WHERE id = $1 AND finished_at IS NULL;

-- name: operation_busy
-- The worker did not answer within the install timeout: shown as "worker busy", not as a failure.
UPDATE gallery_operations SET worker_busy = true, phase = 'worker busy', message = $2, updated_at = now()
WHERE id = $1 AND finished_at IS NULL;

-- name: operation_retrying
-- An attempt failed and the intent will be retried: failed for now, still live (a later success corrects it).
UPDATE gallery_operations SET status = 'failed', error = $2, attempts = $3, message = $4, worker_busy = false,
    phase = 'retrying', updated_at = now()
WHERE id = $1 AND finished_at IS NULL;

-- name: operation_finish
-- The operation ended (completed, failed or cancelled); a finished row is frozen.
UPDATE gallery_operations SET status = $2::varchar, error = $3, message = $4, worker_busy = false,
    progress = CASE WHEN $2::varchar = 'completed' THEN 1 ELSE progress END,
    phase = CASE WHEN $2::varchar = 'completed' THEN 'done' ELSE phase END,
    started_at = COALESCE(started_at, now()), finished_at = now(), updated_at = now()
WHERE id = $1 AND finished_at IS NULL
RETURNING parent_id;

-- name: operation_finish_parent
-- A fan-out job ends when its last per-node row ends: failed if any node failed.
UPDATE gallery_operations p SET
    status = CASE WHEN EXISTS (SELECT 1 FROM gallery_operations c WHERE c.parent_id = p.id AND c.status <> 'completed')
                  THEN 'failed' ELSE 'completed' END,
    progress = 1, started_at = COALESCE(p.started_at, now()), finished_at = now(), updated_at = now()
WHERE p.id = $1 AND p.finished_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM gallery_operations c WHERE c.parent_id = p.id AND c.finished_at IS NULL);

-- name: operation_get
-- One activity-record row.
SELECT * FROM gallery_operations WHERE id = $1;

-- name: operation_children
-- The per-node rows of a fan-out job, by node name.
SELECT * FROM gallery_operations WHERE parent_id = $1 ORDER BY node_name, node_id;

-- name: operations_live
-- Operations still running (top-level rows), oldest first.
SELECT * FROM gallery_operations WHERE finished_at IS NULL AND parent_id IS NULL ORDER BY created_at, id;

-- name: operations_history
-- Finished top-level operations, newest first.
SELECT * FROM gallery_operations WHERE finished_at IS NOT NULL AND parent_id IS NULL
ORDER BY finished_at DESC, id LIMIT $1;

-- name: operations_clear
-- Clear history: every finished top-level operation (their per-node rows go with them).
DELETE FROM gallery_operations WHERE finished_at IS NOT NULL AND parent_id IS NULL;

-- name: operations_reap_stale
-- Live rows no intent drives and nobody touched for a while (a frontend died mid synchronous op): failed.
UPDATE gallery_operations o SET status = 'failed', error = $2, finished_at = now(), updated_at = now()
WHERE o.finished_at IS NULL AND o.updated_at < now() - make_interval(secs => $1) AND o.op_type <> 'fanout'
  AND NOT EXISTS (SELECT 1 FROM pending_backend_ops b WHERE b.operation_id = o.id)
RETURNING o.parent_id;

-- name: operation_superseded
-- A queued per-node operation whose intent a fan-out job took over: closed, pointing at the job.
UPDATE gallery_operations SET status = 'cancelled', message = $2, finished_at = now(), updated_at = now()
WHERE id = $1 AND finished_at IS NULL;

-- name: load_jobs_running
-- Model loads in progress, for the activity view's staging entries.
SELECT *, 0::float AS silent_s, NULL::float AS moving_s FROM model_load_jobs WHERE state <> 'failed'
ORDER BY created_at, tracking_key;

-- name: load_job_claim
-- Claim a model's load: a new job, or take over one that is orphaned (no heartbeat) or failed past its grace.
INSERT INTO model_load_jobs AS j (tracking_key, state, owner_replica, last_progress, created_at, updated_at)
VALUES ($1, 'pending', $2, now(), now(), now())
ON CONFLICT (tracking_key) DO UPDATE SET state = 'pending', owner_replica = EXCLUDED.owner_replica,
    node_id = '', node_name = '', replica_index = 0, bytes_sent = 0, total_bytes = 0, file_index = 0,
    total_files = 0, last_error = '', error_kind = '', started_at = NULL, install_progress = NULL,
    created_at = now(), updated_at = now(),
    last_progress = now()
WHERE (j.state <> 'failed' AND j.last_progress < now() - make_interval(secs => $3::double precision))
   OR (j.state = 'failed' AND j.updated_at < now() - make_interval(secs => $4::double precision))
RETURNING *;

-- name: load_job_get
-- The load job of a model, if any, with its age in seconds since its last heartbeat.
SELECT *, EXTRACT(EPOCH FROM (now() - last_progress))::double precision AS silent_s,
       EXTRACT(EPOCH FROM (now() - started_at))::double precision AS moving_s
FROM model_load_jobs WHERE tracking_key = $1;

-- name: load_job_heartbeat
-- The owner's 1 s heartbeat: liveness plus the progress waiters and the 503 body show.
UPDATE model_load_jobs SET last_progress = now(), updated_at = now(), state = $3, node_id = $4, node_name = $5,
    replica_index = $6, bytes_sent = $7, total_bytes = $8, file_index = $9, total_files = $10,
    started_at = COALESCE(started_at, CASE WHEN $11::boolean THEN now() END), install_progress = $12::jsonb
WHERE tracking_key = $1 AND owner_replica = $2 AND state <> 'failed'
RETURNING tracking_key;

-- name: load_job_fail
-- The load failed: keep the row (state failed, real cause) for the failure grace so waiters read it.
UPDATE model_load_jobs SET state = 'failed', last_error = $3, error_kind = $4, updated_at = now()
WHERE tracking_key = $1 AND owner_replica = $2;

-- name: load_job_delete
-- The load finished (or its failure grace ended): remove the job.
DELETE FROM model_load_jobs WHERE tracking_key = $1 AND owner_replica = $2;

-- name: load_job_listing
-- Every load job (running, or failed within its grace window), oldest first, bounded.
SELECT *, EXTRACT(EPOCH FROM (now() - last_progress))::double precision AS silent_s,
       EXTRACT(EPOCH FROM (now() - started_at))::double precision AS moving_s
FROM model_load_jobs ORDER BY created_at, tracking_key LIMIT $1;

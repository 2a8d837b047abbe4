-- name: agent_job_insert
-- A new queued job.
INSERT INTO agent_jobs (id, kind, model, prompt) VALUES ($1, $2, $3, $4)
RETURNING id, kind, model, prompt, status, node_id, result, error, trace, created_at, updated_at;

-- name: agent_job_get
-- One job with its trace.
SELECT id, kind, model, prompt, status, node_id, result, error, trace, created_at, updated_at
FROM agent_jobs WHERE id = $1;

-- name: agent_jobs_list
-- The newest jobs, without traces.
SELECT id, kind, model, status, node_id, created_at, updated_at FROM agent_jobs
ORDER BY created_at DESC LIMIT $1;

-- name: agent_job_progress
-- A progress event: status (when given) and one trace entry (when given); a finished job stays finished.
UPDATE agent_jobs SET
    status = CASE WHEN $2 = '' THEN status ELSE $2 END,
    node_id = CASE WHEN $3 = '' THEN node_id ELSE $3 END,
    trace = CASE WHEN $4::jsonb IS NULL THEN trace ELSE trace || jsonb_build_array($4::jsonb) END,
    updated_at = now()
WHERE id = $1 AND status NOT IN ('completed', 'failed', 'cancelled');

-- name: agent_job_finish
-- The job's outcome; only the first one counts.
UPDATE agent_jobs SET status = $2, node_id = CASE WHEN $3 = '' THEN node_id ELSE $3 END, result = $4,
    error = $5, updated_at = now()
WHERE id = $1 AND status NOT IN ('completed', 'failed', 'cancelled');

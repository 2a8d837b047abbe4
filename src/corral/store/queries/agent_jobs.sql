-- name: agent_job_insert
-- A new queued job.
INSERT INTO agent_jobs (id, kind, model, prompt) VALUES ($1, $2, $3, $4)
RETURNING id, kind, model, prompt, status, node_id, result, error, trace, created_at, updated_at;

-- name: agent_job_get
-- One job with its trace.
SELECT id, kind, model, prompt, status, node_id, result, error, trace, trace_count, created_at, updated_at
FROM agent_jobs WHERE id = $1;

-- name: agent_jobs_list
-- The newest jobs, without traces.
SELECT id, kind, model, status, node_id, created_at, updated_at FROM agent_jobs
ORDER BY created_at DESC LIMIT $1;

-- name: agent_job_progress
-- A progress event: status (when given) and one trace entry (when given). A sequenced entry ($5 > 0) takes its
-- place in seq order once, whichever frontend records it first and in whatever order it arrives; a finished job
-- stays finished, but still takes a sequenced entry its result counted (trace_count) that came after the result.
UPDATE agent_jobs SET
    status = CASE WHEN $2 = '' OR status IN ('completed', 'failed', 'cancelled') THEN status ELSE $2 END,
    node_id = CASE WHEN $3 = '' OR status IN ('completed', 'failed', 'cancelled') THEN node_id ELSE $3 END,
    trace = CASE
        WHEN $4::jsonb IS NULL THEN trace
        WHEN $5::bigint = 0 THEN trace || jsonb_build_array($4::jsonb)
        WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(trace) AS t(entry) WHERE (t.entry->>'seq')::bigint = $5::bigint)
            THEN trace
        ELSE (SELECT jsonb_agg(entries.entry ORDER BY (entries.entry->>'seq')::bigint)
              FROM (SELECT t.entry FROM jsonb_array_elements(trace) AS t(entry)
                    UNION ALL SELECT $4::jsonb) AS entries)
    END,
    updated_at = now()
WHERE id = $1 AND (status NOT IN ('completed', 'failed', 'cancelled')
                   OR ($4::jsonb IS NOT NULL AND $5::bigint BETWEEN 1 AND COALESCE(trace_count, 0)));

-- name: agent_job_finish
-- The job's outcome and how many trace entries it published (NULL: not said); only the first one counts.
UPDATE agent_jobs SET status = $2, node_id = CASE WHEN $3 = '' THEN node_id ELSE $3 END, result = $4,
    error = $5, trace_count = $6, updated_at = now()
WHERE id = $1 AND status NOT IN ('completed', 'failed', 'cancelled');

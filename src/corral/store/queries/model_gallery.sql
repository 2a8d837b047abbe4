-- name: model_gallery_touch
-- A running gallery install is alive: its row's updated_at moves even while a download stalls.
UPDATE gallery_operations SET updated_at = now() WHERE id = $1 AND finished_at IS NULL;

-- name: model_gallery_job_stale
-- Fail an install whose frontend stopped driving it (no heartbeat for $2 seconds); returns it when failed.
UPDATE gallery_operations SET status = 'failed', error = $3, finished_at = now(), updated_at = now()
WHERE id = $1 AND op_type = 'model_install' AND finished_at IS NULL
  AND updated_at < now() - make_interval(secs => $2)
RETURNING id;

-- name: model_gallery_jobs
-- Recent model installs (running first, then the newest finished), for GET /models/jobs.
SELECT * FROM gallery_operations WHERE op_type = 'model_install' AND parent_id IS NULL
ORDER BY finished_at IS NOT NULL, created_at DESC LIMIT $1;

-- Issue 11: the worker's backend install progress of a cold load (phase, file, current/total, percentage,
-- worker_busy), shown in the 503 `loading` object and load-status; NULL when no install progress was seen.
ALTER TABLE model_load_jobs ADD COLUMN IF NOT EXISTS install_progress jsonb;

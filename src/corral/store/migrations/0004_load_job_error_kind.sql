-- What kind of failure a failed load job had: 'placement' (no node fits: retryable, 503) or 'load'.
ALTER TABLE model_load_jobs ADD COLUMN IF NOT EXISTS error_kind varchar(16) NOT NULL DEFAULT '';

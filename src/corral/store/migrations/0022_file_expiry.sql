-- Files that expire (issue 25): a file uploaded with `expires_after`, or a batch's output and error files when
-- the batch was created with `output_expires_after`, is gone at `expires_at` (NULL: kept until deleted). Reads
-- treat an expired file as deleted at once; the batch runner deletes the rows (and their chunks) in the
-- background.
ALTER TABLE batch_files ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE INDEX IF NOT EXISTS idx_batch_files_expiry ON batch_files (expires_at) WHERE expires_at IS NOT NULL;
-- A batch's `output_expires_after.seconds`: its output and error files expire that long after they are written.
ALTER TABLE batches ADD COLUMN IF NOT EXISTS output_expires_s integer;

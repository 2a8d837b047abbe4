-- Node identity (issue 10): each node's own credential (sha256 of a secret returned once at its first
-- registration; '' = not keyed yet or re-keyed by an admin), and who drained it ('admin' holds across
-- the worker's re-registration and resume calls; 'worker' is undone by them).
ALTER TABLE backend_nodes ADD COLUMN IF NOT EXISTS credential_hash varchar(64) NOT NULL DEFAULT '';
ALTER TABLE backend_nodes ADD COLUMN IF NOT EXISTS drained_by varchar(16) NOT NULL DEFAULT '';

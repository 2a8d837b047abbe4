-- Node lifecycle and admin auth (issue 5): when a node's status last changed, and hashed API keys.
ALTER TABLE backend_nodes ADD COLUMN IF NOT EXISTS status_changed_at timestamptz NOT NULL DEFAULT now();

CREATE TABLE IF NOT EXISTS api_keys (
    id          varchar(36) PRIMARY KEY,
    name        varchar(255) NOT NULL DEFAULT '',
    role        varchar(16) NOT NULL,
    key_hash    varchar(64) NOT NULL UNIQUE,
    key_prefix  varchar(16) NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX IF NOT EXISTS idx_api_keys_role ON api_keys (role) WHERE revoked_at IS NULL;

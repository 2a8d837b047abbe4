-- API keys carry policy (issue 25): the tenant they bill to (empty: the key's name), the models they may call
-- (names and shell-style globs; empty: every model), rate limits per minute (requests, tokens), token quotas
-- per UTC day and month, and the priority class of their requests (tenancy/caller.py). 0 = unlimited.
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tenant varchar(255) NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS models text[] NOT NULL DEFAULT '{}';
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS rpm bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tpm bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tokens_per_day bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS tokens_per_month bigint NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS priority varchar(16) NOT NULL DEFAULT 'normal';

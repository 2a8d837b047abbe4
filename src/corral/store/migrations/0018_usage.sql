-- Usage accounting (issue 25): the engine's token counts per API key x model x UTC hour, written by each frontend
-- in one batched statement per flush interval (CORRAL_USAGE_FLUSH_INTERVAL), never per request. key_id is the
-- api_keys row id, '' for requests that named no key (tenant 'anonymous'); no foreign key: a revoked or deleted
-- key's usage stays on record. tenant is the key's tenant when the counts were written.
CREATE TABLE IF NOT EXISTS usage (
    key_id             varchar(36) NOT NULL,
    model              varchar(255) NOT NULL,
    hour               timestamptz NOT NULL,
    tenant             varchar(255) NOT NULL,
    requests           bigint NOT NULL DEFAULT 0,
    prompt_tokens      bigint NOT NULL DEFAULT 0,
    completion_tokens  bigint NOT NULL DEFAULT 0,
    cached_tokens      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, model, hour)
);
CREATE INDEX IF NOT EXISTS idx_usage_hour ON usage (hour);
CREATE INDEX IF NOT EXISTS idx_usage_tenant_hour ON usage (tenant, hour);

-- Each key's tokens (prompt + completion) per UTC day, kept by the same statement that writes `usage`: the
-- quotas' day and month totals are re-read from here after every flush (at most keys x 31 rows).
CREATE TABLE IF NOT EXISTS usage_key_days (
    key_id  varchar(36) NOT NULL,
    day     date NOT NULL,
    tokens  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);
CREATE INDEX IF NOT EXISTS idx_usage_key_days_day ON usage_key_days (day);

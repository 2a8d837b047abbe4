-- Agent workers (issue 13): the API key provisioned for an agent node, and agent jobs (MCP CI jobs and
-- agent chats run on agent workers) with their progress and result.
ALTER TABLE backend_nodes ADD COLUMN IF NOT EXISTS api_key_id varchar(36) NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS agent_jobs (
    id          varchar(36) PRIMARY KEY,
    kind        varchar(16) NOT NULL,
    model       varchar(255) NOT NULL,
    prompt      text NOT NULL DEFAULT '',
    status      varchar(16) NOT NULL DEFAULT 'queued',
    node_id     varchar(36) NOT NULL DEFAULT '',
    result      text NOT NULL DEFAULT '',
    error       text NOT NULL DEFAULT '',
    trace       jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_agent_jobs_created ON agent_jobs (created_at DESC);

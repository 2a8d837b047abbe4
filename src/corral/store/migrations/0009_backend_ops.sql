-- Issue 11: the activity record (reference §2.9 `gallery_operations`) and durable backend intents (§2.8).
-- corral's additions: `parent_id` groups the per-node rows of one fan-out install under its job;
-- `node_id`/`node_name`, `started_at`/`finished_at` give every row its place and timing; `worker_busy`
-- marks a row whose worker has not answered within the install timeout (shown, never a failure).
CREATE TABLE IF NOT EXISTS gallery_operations (
    id                   varchar(36) PRIMARY KEY,
    parent_id            varchar(36) REFERENCES gallery_operations (id) ON DELETE CASCADE,
    user_id              varchar(64) NOT NULL DEFAULT '',
    gallery_element_name varchar(255) NOT NULL,
    cache_key            varchar(512) NOT NULL DEFAULT '',
    is_backend_op        boolean NOT NULL DEFAULT false,
    op_type              varchar(32) NOT NULL,
    status               varchar(16) NOT NULL DEFAULT 'pending',
    progress             double precision NOT NULL DEFAULT 0,
    phase                varchar(32) NOT NULL DEFAULT '',
    current_bytes        bigint NOT NULL DEFAULT 0,
    total_bytes          bigint NOT NULL DEFAULT 0,
    message              text NOT NULL DEFAULT '',
    error                text NOT NULL DEFAULT '',
    file_name            text NOT NULL DEFAULT '',
    total_file_size      varchar(64) NOT NULL DEFAULT '',
    downloaded_file_size varchar(64) NOT NULL DEFAULT '',
    node_id              varchar(36) NOT NULL DEFAULT '',
    node_name            varchar(255) NOT NULL DEFAULT '',
    frontend_id          varchar(64) NOT NULL DEFAULT '',
    cancellable          boolean NOT NULL DEFAULT false,
    worker_busy          boolean NOT NULL DEFAULT false,
    attempts             bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz
);
CREATE INDEX IF NOT EXISTS idx_gallery_operations_cache_key ON gallery_operations (cache_key);
CREATE INDEX IF NOT EXISTS idx_gallery_operations_parent ON gallery_operations (parent_id);
CREATE INDEX IF NOT EXISTS idx_gallery_operations_created ON gallery_operations (created_at);

CREATE TABLE IF NOT EXISTS pending_backend_ops (
    id            bigserial PRIMARY KEY,
    node_id       varchar(36) NOT NULL REFERENCES backend_nodes (id) ON DELETE CASCADE,
    backend       varchar(255) NOT NULL,
    op            varchar(16) NOT NULL CHECK (op IN ('install', 'upgrade', 'delete')),
    galleries     bytea,
    request       jsonb NOT NULL DEFAULT '{}'::jsonb,
    operation_id  varchar(36) REFERENCES gallery_operations (id) ON DELETE SET NULL,
    attempts      bigint NOT NULL DEFAULT 0,
    last_error    text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    next_retry_at timestamptz NOT NULL DEFAULT now(),
    lease_owner   varchar(64) NOT NULL DEFAULT '',
    lease_until   timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_pending_backend_op ON pending_backend_ops (node_id, backend, op);
CREATE INDEX IF NOT EXISTS idx_pending_backend_ops_node ON pending_backend_ops (node_id);
CREATE INDEX IF NOT EXISTS idx_pending_backend_ops_backend ON pending_backend_ops (backend);
CREATE INDEX IF NOT EXISTS idx_pending_backend_ops_next_retry ON pending_backend_ops (next_retry_at);

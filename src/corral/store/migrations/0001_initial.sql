-- Node registry, replica rows, durable load jobs and labels (reference §2.1, 2.2, 2.5, 2.6).
CREATE TABLE IF NOT EXISTS backend_nodes (
    id                                  varchar(36) PRIMARY KEY,
    name                                varchar(255) NOT NULL UNIQUE,
    node_type                           varchar(32) NOT NULL DEFAULT 'backend',
    address                             varchar(255) NOT NULL DEFAULT '',
    http_address                        varchar(255) NOT NULL DEFAULT '',
    status                              varchar(32) NOT NULL DEFAULT 'registering',
    token_hash                          varchar(64) NOT NULL DEFAULT '',
    total_vram                          bigint NOT NULL DEFAULT 0,
    available_vram                      bigint NOT NULL DEFAULT 0,
    reserved_vram                       bigint NOT NULL DEFAULT 0,
    total_ram                           bigint NOT NULL DEFAULT 0,
    available_ram                       bigint NOT NULL DEFAULT 0,
    total_disk                          bigint NOT NULL DEFAULT 0,
    available_disk                      bigint NOT NULL DEFAULT 0,
    gpu_vendor                          varchar(32) NOT NULL DEFAULT '',
    gpu_compute_capability              varchar(16) NOT NULL DEFAULT '',
    capability                          varchar(64) NOT NULL DEFAULT '',
    max_replicas_per_model              bigint NOT NULL DEFAULT 1,
    max_replicas_per_model_manually_set boolean NOT NULL DEFAULT false,
    vram_budget                         varchar(32) NOT NULL DEFAULT '',
    vram_budget_bytes                   bigint NOT NULL DEFAULT 0,
    vram_budget_manually_set            boolean NOT NULL DEFAULT false,
    approved                            boolean NOT NULL DEFAULT false,
    last_heartbeat                      timestamptz,
    created_at                          timestamptz NOT NULL DEFAULT now(),
    updated_at                          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_backend_nodes_status ON backend_nodes (status);

CREATE TABLE IF NOT EXISTS node_models (
    id                     varchar(36) PRIMARY KEY,
    node_id                varchar(36) NOT NULL REFERENCES backend_nodes (id) ON DELETE CASCADE,
    model_name             varchar(255) NOT NULL,
    replica_index          bigint NOT NULL DEFAULT 0,
    address                varchar(255) NOT NULL DEFAULT '',
    state                  varchar(32) NOT NULL DEFAULT 'idle',
    in_flight              bigint NOT NULL DEFAULT 0,
    last_used              timestamptz NOT NULL DEFAULT now(),
    loading_by             varchar(36) NOT NULL DEFAULT '',
    backend_type           varchar(128) NOT NULL DEFAULT '',
    model_opts_blob        bytea,
    config_revision        varchar(255) NOT NULL DEFAULT '',
    effective_options_hash varchar(128) NOT NULL DEFAULT '',
    cleanup_error          text NOT NULL DEFAULT '',
    cleanup_attempts       bigint NOT NULL DEFAULT 0,
    cleanup_next_retry_at  timestamptz,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (node_id, model_name, replica_index)
);
CREATE INDEX IF NOT EXISTS idx_node_models_model ON node_models (model_name, state);

CREATE TABLE IF NOT EXISTS model_load_jobs (
    tracking_key   varchar(255) PRIMARY KEY,
    state          varchar(16) NOT NULL,
    owner_replica  varchar(64) NOT NULL DEFAULT '',
    node_id        varchar(36) NOT NULL DEFAULT '',
    node_name      varchar(255) NOT NULL DEFAULT '',
    replica_index  bigint NOT NULL DEFAULT 0,
    bytes_sent     bigint NOT NULL DEFAULT 0,
    total_bytes    bigint NOT NULL DEFAULT 0,
    file_index     bigint NOT NULL DEFAULT 0,
    total_files    bigint NOT NULL DEFAULT 0,
    last_error     text NOT NULL DEFAULT '',
    started_at     timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    last_progress  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_model_load_jobs_state ON model_load_jobs (state);
CREATE INDEX IF NOT EXISTS idx_model_load_jobs_last_progress ON model_load_jobs (last_progress);

CREATE TABLE IF NOT EXISTS node_labels (
    id      varchar(36) PRIMARY KEY,
    node_id varchar(36) NOT NULL REFERENCES backend_nodes (id) ON DELETE CASCADE,
    key     varchar(128) NOT NULL,
    value   varchar(255) NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_node_label ON node_labels (node_id, key);

-- Scheduling rules (reference §2.7) and the reconciler's replay information (reference §2.3), issue 6.
CREATE TABLE IF NOT EXISTS model_scheduling_configs (
    id                        varchar(36) PRIMARY KEY,
    model_name                varchar(255) NOT NULL UNIQUE,
    node_selector             text NOT NULL DEFAULT '',
    min_replicas              bigint NOT NULL DEFAULT 0,
    max_replicas              bigint NOT NULL DEFAULT 0,
    spread_all                boolean NOT NULL DEFAULT false,
    route_policy              varchar(32) NOT NULL DEFAULT '',
    balance_abs_threshold     bigint NOT NULL DEFAULT 0,
    balance_rel_threshold     double precision NOT NULL DEFAULT 0,
    min_prefix_match          double precision NOT NULL DEFAULT 0,
    unsatisfiable_until       timestamptz,
    unsatisfiable_ticks       bigint NOT NULL DEFAULT 0,
    unsatisfiable_reason      text NOT NULL DEFAULT '',
    unsatisfiable_fingerprint varchar(64) NOT NULL DEFAULT '',
    declared                  boolean NOT NULL DEFAULT false,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS model_load_infos (
    model_name      varchar(255) PRIMARY KEY,
    backend_type    varchar(128) NOT NULL DEFAULT '',
    model_opts_blob bytea,
    config_revision varchar(255) NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

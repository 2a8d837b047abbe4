-- The current configuration generation of each model, shared by every frontend (reference §2.4), with
-- the YAML itself so a frontend that did not make an edit can adopt it.
CREATE TABLE IF NOT EXISTS model_config_states (
    model_name      varchar(255) PRIMARY KEY,
    config_revision varchar(255) NOT NULL CONSTRAINT model_config_states_revision_nonempty
                        CHECK (config_revision <> ''),
    config_yaml     text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_node_models_cleanup ON node_models (state, cleanup_next_retry_at);

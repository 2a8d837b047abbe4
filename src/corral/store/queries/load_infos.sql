-- name: load_info_upsert
-- After a successful cold load: what the reconciler needs to load the model again (backend + options).
INSERT INTO model_load_infos (model_name, backend_type, model_opts_blob, config_revision)
VALUES ($1, $2, $3, $4)
ON CONFLICT (model_name) DO UPDATE SET backend_type = EXCLUDED.backend_type,
    model_opts_blob = EXCLUDED.model_opts_blob, config_revision = EXCLUDED.config_revision, updated_at = now();

-- name: load_info_replayable
-- A model's replay information, only if it matches the current revision (or no revision is stored yet).
SELECT i.model_name, i.backend_type, i.model_opts_blob, i.config_revision, s.config_revision AS current_revision
FROM model_load_infos i
LEFT JOIN model_config_states s ON s.model_name = i.model_name
WHERE i.model_name = $1 AND i.model_opts_blob IS NOT NULL
  AND (s.model_name IS NULL OR (i.config_revision <> '' AND i.config_revision = s.config_revision));

-- name: setting_get
-- One runtime setting's value (JSON).
SELECT value::text AS value FROM runtime_settings WHERE key = $1;

-- name: setting_put
-- Set a runtime setting; the last write wins.
INSERT INTO runtime_settings (key, value, updated_at) VALUES ($1, $2::jsonb, now())
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now();

-- name: settings_all
-- Every runtime setting.
SELECT key, value::text AS value FROM runtime_settings ORDER BY key;

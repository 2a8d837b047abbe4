-- name: api_key_insert
-- A new API key (only its sha256 is stored); an existing hash is left untouched, revoked or not.
INSERT INTO api_keys (id, name, role, key_hash, key_prefix) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key_hash) DO NOTHING
RETURNING id, name, role, key_prefix, created_at, revoked_at, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority;

-- name: api_key_insert_with_policy
-- A new API key with its policy (tenancy/policy.py); an existing hash is left untouched, revoked or not.
INSERT INTO api_keys (id, name, role, key_hash, key_prefix, tenant, models, rpm, tpm, tokens_per_day,
                      tokens_per_month, priority)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (key_hash) DO NOTHING
RETURNING id, name, role, key_prefix, created_at, revoked_at, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority;

-- name: api_key_policy_update
-- Change a live key's policy: each NULL parameter keeps its column; returns the row and its hash (caches drop it).
UPDATE api_keys SET tenant = coalesce($2, tenant), models = coalesce($3, models), rpm = coalesce($4, rpm),
    tpm = coalesce($5, tpm), tokens_per_day = coalesce($6, tokens_per_day),
    tokens_per_month = coalesce($7, tokens_per_month), priority = coalesce($8, priority)
WHERE id = $1 AND revoked_at IS NULL
RETURNING id, name, role, key_prefix, created_at, revoked_at, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority, key_hash;

-- name: api_key_access
-- A live (not revoked) key's role and policy by hash: the access layer's one lookup per key.
SELECT id, name, role, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority
FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL;

-- name: api_keys_list
-- Every key, newest first, without hashes.
SELECT id, name, role, key_prefix, created_at, revoked_at, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority FROM api_keys ORDER BY created_at DESC, id;

-- name: api_key_revoke
-- Revoke a key; returns its hash so caches everywhere can drop it.
UPDATE api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL RETURNING key_hash;

-- name: api_keys_live_admin_count
-- How many admin keys can still be used.
SELECT count(*) FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL;

-- name: node_api_key_swap
-- Point an agent node at its new key; returns the id of the key it held before ('' when none).
UPDATE backend_nodes n SET api_key_id = $2 FROM (SELECT api_key_id FROM backend_nodes WHERE id = $1 FOR UPDATE) old
WHERE n.id = $1 RETURNING old.api_key_id;

-- name: api_key_access_by_id
-- A live key's role and policy by id (work run later on a key's behalf: batch lines).
SELECT id, name, role, tenant, models, rpm, tpm, tokens_per_day, tokens_per_month, priority
FROM api_keys WHERE id = $1 AND revoked_at IS NULL;

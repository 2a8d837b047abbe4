-- name: node_by_name
-- The node registered under a name (names are the identity across re-registrations).
SELECT * FROM backend_nodes WHERE name = $1;

-- name: node_by_id
-- One node by id.
SELECT * FROM backend_nodes WHERE id = $1;

-- name: node_insert
-- A newly registered node with its credential; nothing when the name was taken meanwhile (the caller re-registers).
INSERT INTO backend_nodes (id, name, node_type, address, http_address, status, token_hash, approved,
    total_vram, available_vram, total_ram, available_ram, total_disk, available_disk, gpu_vendor,
    gpu_compute_capability, capability, max_replicas_per_model, vram_budget, credential_hash, last_heartbeat,
    status_changed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, now(), now())
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: node_by_name_locked
-- The node registered under a name, locked until the re-registration decides.
SELECT * FROM backend_nodes WHERE name = $1 FOR UPDATE;

-- name: node_reregister
-- A known node registering again, only with its own credential ($20) or while it has none (then it takes $19):
-- refresh addresses and facts, keep the id, admin overrides and an admin drain; a worker's own drain ends.
UPDATE backend_nodes SET node_type = $2, address = $3, http_address = $4,
    status_changed_at = CASE WHEN status <> (CASE WHEN drained_by = 'admin' THEN 'draining' ELSE $5 END)
                             THEN now() ELSE status_changed_at END,
    status = CASE WHEN drained_by = 'admin' THEN 'draining' ELSE $5 END,
    drained_by = CASE WHEN drained_by = 'admin' THEN 'admin' ELSE '' END,
    token_hash = $6, approved = $7, total_vram = $8, available_vram = $9, total_ram = $10, available_ram = $11,
    total_disk = $12, available_disk = $13, gpu_vendor = $14, gpu_compute_capability = $15,
    capability = $16,
    max_replicas_per_model = CASE WHEN max_replicas_per_model_manually_set THEN max_replicas_per_model
                                  ELSE $17 END,
    vram_budget = CASE WHEN vram_budget_manually_set THEN vram_budget ELSE $18 END,
    credential_hash = CASE WHEN credential_hash = '' THEN $19 ELSE credential_hash END,
    last_heartbeat = now(), updated_at = now()
WHERE id = $1 AND (credential_hash = '' OR credential_hash = $20)
RETURNING *;

-- name: node_heartbeat
-- A durable heartbeat: the timestamp always; the reported figures when given (NULL keeps the old value).
UPDATE backend_nodes SET last_heartbeat = now(),
    available_vram = COALESCE($2, available_vram), available_ram = COALESCE($3, available_ram),
    total_disk = COALESCE($4, total_disk), available_disk = COALESCE($5, available_disk),
    total_vram = COALESCE($6, total_vram), gpu_vendor = COALESCE($7, gpu_vendor),
    reserved_vram = CASE WHEN $2::bigint IS NULL THEN reserved_vram ELSE 0 END,
    updated_at = now()
WHERE id = $1
RETURNING id, status, approved;

-- name: node_set_status
-- Change a node's status (offline), remembering when.
UPDATE backend_nodes SET status = $2, status_changed_at = now(), updated_at = now() WHERE id = $1 RETURNING id;

-- name: node_drain
-- Drain a node; an admin's drain ($2 = 'admin') is remembered and a worker's own drain never replaces it.
UPDATE backend_nodes SET status = 'draining',
    status_changed_at = CASE WHEN status <> 'draining' THEN now() ELSE status_changed_at END,
    drained_by = CASE WHEN drained_by = 'admin' THEN 'admin' ELSE $2 END, updated_at = now()
WHERE id = $1
RETURNING id;

-- name: node_resume
-- Resume a node to healthy; a worker's call ($2 = false) leaves a node an admin drained as it is.
UPDATE backend_nodes SET status = 'healthy', drained_by = '',
    status_changed_at = CASE WHEN status <> 'healthy' THEN now() ELSE status_changed_at END, updated_at = now()
WHERE id = $1 AND ($2 OR drained_by <> 'admin')
RETURNING id;

-- name: node_rekey
-- Forget a node's credential: its next registration (by name) is accepted and gets a new one.
UPDATE backend_nodes SET credential_hash = '', updated_at = now() WHERE id = $1 RETURNING id, name, status;

-- name: node_credential
-- A node's credential hash ('' when it has none) for the node routes' check.
SELECT credential_hash FROM backend_nodes WHERE id = $1;

-- name: node_swap_status
-- Change a node's status only if it is still what the caller saw (health monitor vs. registration races).
UPDATE backend_nodes SET status = $3, status_changed_at = now(), updated_at = now()
WHERE id = $1 AND status = $2
RETURNING id;

-- name: node_approve
-- Approve a node once: a pending node becomes healthy; an offline one recovers to healthy when it beats.
UPDATE backend_nodes SET approved = true,
    status = CASE WHEN status = 'pending' THEN 'healthy' ELSE status END,
    status_changed_at = CASE WHEN status = 'pending' THEN now() ELSE status_changed_at END,
    updated_at = now()
WHERE id = $1 AND NOT approved
RETURNING *;

-- name: node_delete
-- Forget a node entirely (its replica rows and labels go with it; an agent node's API key is revoked).
WITH gone AS (DELETE FROM backend_nodes WHERE id = $1 RETURNING id, api_key_id),
revoked AS (UPDATE api_keys SET revoked_at = now()
            WHERE id = (SELECT api_key_id FROM gone) AND revoked_at IS NULL RETURNING id)
SELECT id FROM gone;

-- name: nodes_for_health
-- What the health monitor decides over: status, approval and the durable heartbeat of every node.
SELECT id, name, status, approved, drained_by, last_heartbeat, status_changed_at FROM backend_nodes;

-- name: nodes_list
-- Every node with its replica count, in-flight sum and labels, by name.
SELECT n.*,
    (SELECT count(*) FROM node_models m WHERE m.node_id = n.id) AS model_count,
    COALESCE((SELECT sum(in_flight) FROM node_models m WHERE m.node_id = n.id AND m.state = 'loaded'), 0)
        AS in_flight_count,
    COALESCE((SELECT jsonb_object_agg(l.key, l.value) FROM node_labels l WHERE l.node_id = n.id), '{}'::jsonb)
        AS labels
FROM backend_nodes n
WHERE $1::varchar IS NULL OR n.id = $1
ORDER BY n.name;

-- name: node_set_max_replicas
-- Sticky admin override of replicas per model on a node.
UPDATE backend_nodes SET max_replicas_per_model = $2, max_replicas_per_model_manually_set = true,
    updated_at = now()
WHERE id = $1
RETURNING id;

-- name: node_reset_max_replicas
-- Drop the admin override; the worker's own figure applies from its next registration.
UPDATE backend_nodes SET max_replicas_per_model_manually_set = false, updated_at = now()
WHERE id = $1
RETURNING id;

-- name: label_upsert
-- Set one label of a node (merge, never replace the set).
INSERT INTO node_labels (id, node_id, key, value) VALUES ($1, $2, $3, $4)
ON CONFLICT (node_id, key) DO UPDATE SET value = EXCLUDED.value;


-- name: nodes_pending_count
-- Nodes never approved (pending, or offline since): what the pending cap counts.
SELECT count(*) FROM backend_nodes WHERE NOT approved;

-- name: node_expire_pending
-- Forget a never-approved node whose last registration or heartbeat is older than $2 seconds.
DELETE FROM backend_nodes
WHERE id = $1 AND NOT approved AND last_heartbeat < now() - make_interval(secs => $2)
RETURNING id, name, status;

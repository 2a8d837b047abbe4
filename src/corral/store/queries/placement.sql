-- name: placement_nodes
-- The nodes of a placement snapshot: healthy, approved backend nodes (a node that was never approved gets
-- no work, whatever its status says). Labels and replicas come flat in the next two queries, not as
-- per-node JSON: 10,000 nodes read in a fraction of the time.
SELECT n.id, n.name, n.address, n.http_address, n.total_vram, n.available_vram, n.reserved_vram,
    n.vram_budget_bytes, n.total_disk, n.available_disk, n.max_replicas_per_model
FROM backend_nodes n
WHERE n.status = 'healthy' AND n.approved AND n.node_type = 'backend'
ORDER BY n.name;

-- name: placement_labels
-- The labels of the nodes placement_nodes returns.
SELECT l.node_id, l.key, l.value
FROM node_labels l JOIN backend_nodes n ON n.id = l.node_id
WHERE n.status = 'healthy' AND n.approved AND n.node_type = 'backend';

-- name: placement_replicas
-- The replica rows of the nodes placement_nodes returns.
SELECT m.node_id, m.model_name, m.replica_index, m.state, m.address, m.in_flight,
    EXTRACT(EPOCH FROM m.last_used)::float8 AS last_used_s, m.vram_bytes
FROM node_models m JOIN backend_nodes n ON n.id = m.node_id
WHERE n.status = 'healthy' AND n.approved AND n.node_type = 'backend'
ORDER BY m.node_id, m.model_name, m.replica_index;

-- name: vram_reserve
-- Soft-reserve VRAM on a node for a load in progress (no row when it no longer fits).
UPDATE backend_nodes SET reserved_vram = reserved_vram + $2
WHERE id = $1 AND available_vram - reserved_vram >= $2
RETURNING id;

-- name: vram_release
-- Give back a soft reservation (never below zero).
UPDATE backend_nodes SET reserved_vram = GREATEST(0, reserved_vram - $2) WHERE id = $1;

-- name: vram_credit
-- A replica was stopped: its VRAM counts as free until the node's next heartbeat reports the measured value.
UPDATE backend_nodes SET available_vram = LEAST(total_vram, available_vram + $2) WHERE id = $1 AND total_vram > 0;

-- name: node_mark_unhealthy
-- A node that does not answer on the bus: out of placement until it beats again.
UPDATE backend_nodes SET status = 'unhealthy', updated_at = now() WHERE id = $1 AND status = 'healthy';

-- name: node_vram_budget_get
-- A node's budget string and detected VRAM (to resolve the budget in bytes).
SELECT id, vram_budget, total_vram, vram_budget_manually_set FROM backend_nodes WHERE id = $1;

-- name: node_vram_budget_set
-- Store a node's budget and its resolved ceiling; `manual` makes an admin budget sticky across re-registration.
UPDATE backend_nodes SET vram_budget = $2, vram_budget_bytes = $3,
    vram_budget_manually_set = CASE WHEN $4::boolean IS NULL THEN vram_budget_manually_set ELSE $4 END,
    updated_at = now()
WHERE id = $1
RETURNING id;

-- name: placement_watermark
-- The xmin of this transaction's snapshot: every change not visible to it has a change_xid at least this.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint;

-- name: placement_changed_since
-- Nodes changed by transactions not visible to a snapshot whose xmin was $1 (see migration 0012).
SELECT DISTINCT node_id FROM placement_changes WHERE change_xid >= $1;

-- name: placement_nodes_of
-- placement_nodes for the ids in $1 only.
SELECT n.id, n.name, n.address, n.http_address, n.total_vram, n.available_vram, n.reserved_vram,
    n.vram_budget_bytes, n.total_disk, n.available_disk, n.max_replicas_per_model
FROM backend_nodes n
WHERE n.id = ANY($1::varchar[]) AND n.status = 'healthy' AND n.approved AND n.node_type = 'backend';

-- name: placement_labels_of
-- placement_labels for the ids in $1 only.
SELECT l.node_id, l.key, l.value FROM node_labels l WHERE l.node_id = ANY($1::varchar[]);

-- name: placement_replicas_of
-- placement_replicas for the ids in $1 only.
SELECT m.node_id, m.model_name, m.replica_index, m.state, m.address, m.in_flight,
    EXTRACT(EPOCH FROM m.last_used)::float8 AS last_used_s, m.vram_bytes
FROM node_models m
WHERE m.node_id = ANY($1::varchar[])
ORDER BY m.node_id, m.model_name, m.replica_index;

-- name: placement_changes_prune
-- Forget change records older than the retention (a frontend that has not read for that long reads everything).
DELETE FROM placement_changes WHERE at < now() - make_interval(secs => $1::double precision);

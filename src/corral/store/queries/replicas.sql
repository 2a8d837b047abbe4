-- name: replica_upsert
-- Record (or move to a new state) the replica of a model on a node, with the hash of its final load options
-- ('' until they are known: staging).
INSERT INTO node_models (id, node_id, model_name, replica_index, address, state, backend_type, in_flight,
    last_used, updated_at, config_revision, vram_bytes, effective_options_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, 0, now(), now(), $8, $9, $10)
ON CONFLICT (node_id, model_name, replica_index) DO UPDATE SET address = EXCLUDED.address,
    state = EXCLUDED.state, backend_type = EXCLUDED.backend_type, config_revision = EXCLUDED.config_revision,
    vram_bytes = EXCLUDED.vram_bytes, effective_options_hash = EXCLUDED.effective_options_hash, updated_at = now()
RETURNING *;

-- name: replica_delete
-- Forget one replica (its process is gone or was replaced).
DELETE FROM node_models WHERE node_id = $1 AND model_name = $2 AND replica_index = $3 AND address = $4;

-- name: replicas_delete_for_node
-- Forget every replica of a node (re-registration, deregistration).
DELETE FROM node_models WHERE node_id = $1;

-- name: replicas_routable
-- Loaded replicas of a model on healthy nodes, least busy and least recently used first.
SELECT m.node_id, m.model_name, m.replica_index, m.address, n.name AS node_name
FROM node_models m JOIN backend_nodes n ON n.id = m.node_id
WHERE m.model_name = $1 AND m.state = 'loaded' AND n.status = 'healthy'
  AND (NOT EXISTS (SELECT 1 FROM model_config_states s WHERE s.model_name = m.model_name)
       OR m.config_revision = (SELECT s.config_revision FROM model_config_states s
                               WHERE s.model_name = m.model_name))
ORDER BY m.in_flight ASC, m.last_used ASC;

-- name: replicas_of_node
-- Every replica row of a node, any state.
SELECT * FROM node_models WHERE node_id = $1 ORDER BY model_name, replica_index;

-- name: replicas_reclaim_stuck
-- Delete replica rows stuck before serving whose load job no longer drives them (no live heartbeat).
DELETE FROM node_models m
WHERE m.state IN ('staging', 'loading') AND m.updated_at < now() - make_interval(secs => $1::double precision)
  AND NOT EXISTS (SELECT 1 FROM model_load_jobs j WHERE j.tracking_key = m.model_name AND j.state <> 'failed'
                  AND j.last_progress >= now() - make_interval(secs => $1::double precision))
RETURNING m.node_id, m.model_name, m.replica_index, m.address, m.state;

-- name: replica_mark_unloading
-- Take a loaded replica out of routing before stopping it (eviction); no row if it changed meanwhile.
-- The lease keeps the cleanup service off it while the evictor drains it (a crashed evictor's row is
-- finished by the cleanup service once the lease ends).
UPDATE node_models SET state = 'unloading', updated_at = now(),
    cleanup_next_retry_at = now() + make_interval(secs => $5::double precision)
WHERE node_id = $1 AND model_name = $2 AND replica_index = $3 AND address = $4 AND state = 'loaded'
RETURNING id;

-- name: replica_unmark_unloading
-- Put back a replica whose eviction was abandoned (it stayed busy).
UPDATE node_models SET state = 'loaded', updated_at = now()
WHERE node_id = $1 AND model_name = $2 AND replica_index = $3 AND address = $4 AND state = 'unloading';

-- name: replicas_all_routable
-- Every loaded replica on a healthy node: the frontend's view, re-read periodically.
SELECT m.node_id, m.model_name, m.replica_index, m.address, n.name AS node_name
FROM node_models m JOIN backend_nodes n ON n.id = m.node_id
WHERE m.state = 'loaded' AND n.status = 'healthy'
  AND (NOT EXISTS (SELECT 1 FROM model_config_states s WHERE s.model_name = m.model_name)
       OR m.config_revision = (SELECT s.config_revision FROM model_config_states s
                               WHERE s.model_name = m.model_name));

-- name: replicas_reclaim_model_loads
-- A model's load job starts: its rows still staging or loading are a dead owner's (one load per model at a time).
DELETE FROM node_models WHERE model_name = $1 AND state IN ('staging', 'loading')
RETURNING node_id, replica_index, address;

-- name: revision_establish
-- First sight of a model's config: record its revision unless one is already stored.
INSERT INTO model_config_states (model_name, config_revision, config_yaml) VALUES ($1, $2, $3)
ON CONFLICT (model_name) DO NOTHING;

-- name: revision_get
-- The stored revision (and YAML, and its commit number) of one model.
SELECT model_name, config_revision, config_yaml, config_seq,
    EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s
FROM model_config_states WHERE model_name = $1;

-- name: revision_all
-- Every stored revision.
SELECT model_name, config_revision, config_yaml, config_seq,
    EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s
FROM model_config_states;

-- name: revision_seqs
-- Every model's commit number (a frontend's periodic check for a change whose event it missed).
SELECT model_name, config_seq FROM model_config_states;

-- name: revision_lock
-- The committed row of one model, locked until the edit that read it commits (edits to one model serialise).
SELECT model_name, config_revision, config_yaml, config_seq FROM model_config_states WHERE model_name = $1
FOR UPDATE;

-- name: revision_advance
-- A validated edit: the new revision becomes current (locks the row for the quarantine that follows); a change
-- of content takes the next commit number, a re-assertion of the same content keeps its number.
INSERT INTO model_config_states (model_name, config_revision, config_yaml, updated_at) VALUES ($1, $2, $3, now())
ON CONFLICT (model_name) DO UPDATE SET config_revision = EXCLUDED.config_revision,
    config_yaml = EXCLUDED.config_yaml, updated_at = now(),
    config_seq = CASE WHEN model_config_states.config_revision = EXCLUDED.config_revision
                       AND model_config_states.config_yaml = EXCLUDED.config_yaml
                      THEN model_config_states.config_seq ELSE nextval('model_config_seq') END
RETURNING config_seq;

-- name: revision_quarantine
-- Replicas of any other revision leave routing at once: unloading, due for an exact stop now.
UPDATE node_models SET state = 'unloading', cleanup_error = '', cleanup_attempts = 0,
    cleanup_next_retry_at = now(), updated_at = now()
WHERE model_name = $1 AND state IN ('loaded', 'loading', 'staging') AND config_revision IS DISTINCT FROM $2
RETURNING id, node_id, model_name, replica_index, address;

-- name: cleanup_claim
-- Take one due unloading row for an exact stop, leased for 2 minutes (other frontends skip it).
UPDATE node_models SET cleanup_next_retry_at = now() + interval '2 minutes'
WHERE id = (SELECT id FROM node_models
            WHERE state = 'unloading' AND (cleanup_next_retry_at IS NULL OR cleanup_next_retry_at <= now())
            ORDER BY cleanup_next_retry_at NULLS FIRST LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, node_id, model_name, replica_index, address, cleanup_attempts;

-- name: cleanup_failed
-- The stop did not complete: remember why and retry with backoff (1 s × 2^attempts, at most 5 minutes).
UPDATE node_models SET cleanup_error = $2, cleanup_attempts = cleanup_attempts + 1,
    cleanup_next_retry_at = now() + make_interval(secs => LEAST(300, power(2, cleanup_attempts + 1))::double precision)
WHERE id = $1;

-- name: cleanup_later
-- Not yet: the replica still has requests in flight; look again shortly (no attempt counted).
UPDATE node_models SET cleanup_next_retry_at = now() + make_interval(secs => $2::double precision) WHERE id = $1;

-- name: cleanup_done
-- The exact process is gone: forget the row.
DELETE FROM node_models WHERE id = $1 AND state = 'unloading';

-- name: cleanup_pending_count
-- How many replicas of a model still wait for their exact stop.
SELECT count(*) FROM node_models WHERE model_name = $1 AND state = 'unloading';

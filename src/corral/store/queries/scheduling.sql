-- name: rules_all
-- Every scheduling rule, by model name (the API's listing order).
SELECT *, EXTRACT(EPOCH FROM created_at)::double precision AS created_s,
       EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s,
       EXTRACT(EPOCH FROM unsatisfiable_until)::double precision AS unsatisfiable_until_s,
       EXTRACT(EPOCH FROM autoscale_checked_at)::double precision AS autoscale_checked_s,
       EXTRACT(EPOCH FROM autoscale_last_action_at)::double precision AS autoscale_last_action_s
FROM model_scheduling_configs ORDER BY model_name;

-- name: rule_get
-- One scheduling rule by the name it is keyed by (a model or an alias).
SELECT *, EXTRACT(EPOCH FROM created_at)::double precision AS created_s,
       EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s,
       EXTRACT(EPOCH FROM unsatisfiable_until)::double precision AS unsatisfiable_until_s,
       EXTRACT(EPOCH FROM autoscale_checked_at)::double precision AS autoscale_checked_s,
       EXTRACT(EPOCH FROM autoscale_last_action_at)::double precision AS autoscale_last_action_s
FROM model_scheduling_configs WHERE model_name = $1;

-- name: rule_upsert
-- Create or replace a rule (API: routing overrides NULL keep the stored value; the autoscaling fields are
-- replaced, NULL = off); its cooldown restarts.
INSERT INTO model_scheduling_configs AS r (id, model_name, node_selector, min_replicas, max_replicas, spread_all,
    route_policy, balance_abs_threshold, balance_rel_threshold, min_prefix_match, declared,
    target_queue_wait_s, target_ttft_s, scale_down_idle_s, autoscale_cooldown_s, schedules)
VALUES ($1, $2, $3, $4, $5, $6, COALESCE($7::varchar, ''), COALESCE($8::bigint, 0),
    COALESCE($9::double precision, 0), COALESCE($10::double precision, 0), $11,
    $12, $13, $14, $15, $16::jsonb)
ON CONFLICT (model_name) DO UPDATE SET node_selector = EXCLUDED.node_selector,
    min_replicas = EXCLUDED.min_replicas, max_replicas = EXCLUDED.max_replicas, spread_all = EXCLUDED.spread_all,
    route_policy = COALESCE($7, r.route_policy),
    balance_abs_threshold = COALESCE($8, r.balance_abs_threshold),
    balance_rel_threshold = COALESCE($9, r.balance_rel_threshold),
    min_prefix_match = COALESCE($10, r.min_prefix_match),
    declared = r.declared OR EXCLUDED.declared,
    target_queue_wait_s = EXCLUDED.target_queue_wait_s, target_ttft_s = EXCLUDED.target_ttft_s,
    scale_down_idle_s = EXCLUDED.scale_down_idle_s, autoscale_cooldown_s = EXCLUDED.autoscale_cooldown_s,
    schedules = EXCLUDED.schedules,
    unsatisfiable_until = NULL, unsatisfiable_ticks = 0, unsatisfiable_reason = '',
    unsatisfiable_fingerprint = '', updated_at = now()
RETURNING *, EXTRACT(EPOCH FROM created_at)::double precision AS created_s,
          EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s,
          EXTRACT(EPOCH FROM unsatisfiable_until)::double precision AS unsatisfiable_until_s,
          EXTRACT(EPOCH FROM autoscale_checked_at)::double precision AS autoscale_checked_s,
          EXTRACT(EPOCH FROM autoscale_last_action_at)::double precision AS autoscale_last_action_s;

-- name: rule_delete
-- Remove a rule; the model falls back to on-demand placement.
DELETE FROM model_scheduling_configs WHERE model_name = $1 RETURNING model_name;

-- name: rule_unsatisfied
-- The reconciler could not satisfy a rule this pass: count it; from the threshold on, cool down.
UPDATE model_scheduling_configs SET unsatisfiable_ticks = unsatisfiable_ticks + 1, unsatisfiable_reason = $2,
    unsatisfiable_fingerprint = $3,
    unsatisfiable_until = CASE WHEN unsatisfiable_ticks + 1 >= $4
                               THEN now() + make_interval(secs => $5::double precision) END
WHERE model_name = $1
RETURNING unsatisfiable_ticks;

-- name: rule_satisfied
-- The rule made progress: forget its failures.
UPDATE model_scheduling_configs SET unsatisfiable_until = NULL, unsatisfiable_ticks = 0, unsatisfiable_reason = '',
    unsatisfiable_fingerprint = ''
WHERE model_name = $1 AND (unsatisfiable_ticks > 0 OR unsatisfiable_until IS NOT NULL OR unsatisfiable_reason <> '');

-- name: rule_note
-- Say why a rule waits without counting it as unsatisfiable (e.g. the model never loaded anywhere yet).
UPDATE model_scheduling_configs SET unsatisfiable_reason = $2
WHERE model_name = $1 AND unsatisfiable_reason <> $2;

-- name: rules_clear_cooldowns
-- The registry changed (registration, approval, labels, budgets): every unsatisfiable rule is retried.
UPDATE model_scheduling_configs SET unsatisfiable_until = NULL, unsatisfiable_ticks = 0,
    unsatisfiable_fingerprint = ''
WHERE unsatisfiable_ticks > 0 OR unsatisfiable_until IS NOT NULL;

-- name: loaded_replica_counts
-- Loaded replicas per model on healthy nodes (a rule's status).
SELECT m.model_name, count(*) AS loaded FROM node_models m JOIN backend_nodes n ON n.id = m.node_id
WHERE m.state = 'loaded' AND n.status = 'healthy'
GROUP BY m.model_name;

-- name: rule_autoscale_record
-- The autoscaler's pass over a rule: why it scaled or not, its passes over target, and (when $4 is not NULL)
-- the action it took at $5 (epoch seconds of the reconciler's clock, which also judges the cooldown).
UPDATE model_scheduling_configs SET autoscale_reason = $2, autoscale_over_passes = $3,
    autoscale_checked_at = to_timestamp($5::double precision),
    autoscale_last_action = COALESCE($4::text, autoscale_last_action),
    autoscale_last_action_at = CASE WHEN $4::text IS NULL THEN autoscale_last_action_at
                                    ELSE to_timestamp($5::double precision) END
WHERE model_name = $1;

-- name: backend_op_upsert
-- Record an intent (unique per node, backend, op); a repeated request refreshes it and keeps its operation.
INSERT INTO pending_backend_ops (node_id, backend, op, galleries, request, operation_id)
VALUES ($1, $2, $3, $4, $5::jsonb, $6)
ON CONFLICT (node_id, backend, op) DO UPDATE SET galleries = EXCLUDED.galleries, request = EXCLUDED.request,
    next_retry_at = now(), attempts = 0, last_error = '',
    operation_id = COALESCE(pending_backend_ops.operation_id, EXCLUDED.operation_id)
RETURNING operation_id;

-- name: backend_op_claim
-- Take one due intent no live frontend holds (SKIP LOCKED: two frontends never drive one intent at once).
UPDATE pending_backend_ops SET lease_owner = $1, lease_until = now() + make_interval(secs => $2)
WHERE id = (SELECT id FROM pending_backend_ops
            WHERE next_retry_at <= now() AND (lease_until IS NULL OR lease_until < now())
            ORDER BY next_retry_at, id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING *;

-- name: backend_op_renew
-- Keep the lease of an intent this frontend is driving (a dead frontend's lease runs out; another resumes).
UPDATE pending_backend_ops SET lease_until = now() + make_interval(secs => $3)
WHERE id = $1 AND lease_owner = $2
RETURNING id;

-- name: backend_op_done
-- The intent is carried out (or dropped): forget it.
DELETE FROM pending_backend_ops WHERE id = $1;

-- name: backend_op_retry
-- An attempt failed: count it and wait `delay` seconds before the next one.
UPDATE pending_backend_ops SET attempts = $2, last_error = $3, next_retry_at = now() + make_interval(secs => $4),
    lease_owner = '', lease_until = NULL
WHERE id = $1;

-- name: backend_op_later
-- The worker is still working on it (no reply within the timeout): try again later without counting an attempt.
UPDATE pending_backend_ops SET last_error = $2, next_retry_at = now() + make_interval(secs => $3),
    lease_owner = '', lease_until = NULL
WHERE id = $1;

-- name: backend_op_prune
-- Intents that can no longer run: node draining, or offline/unhealthy without a heartbeat for `$1` seconds.
DELETE FROM pending_backend_ops b USING backend_nodes n
WHERE n.id = b.node_id
  AND (n.status = 'draining'
       OR (n.status IN ('offline', 'unhealthy') AND (n.last_heartbeat IS NULL
           OR n.last_heartbeat < now() - make_interval(secs => $1))))
RETURNING b.operation_id, b.node_id, n.status;

-- name: backend_ops_of_operation
-- The intents still pending for an operation or its per-node rows.
SELECT b.* FROM pending_backend_ops b JOIN gallery_operations o ON o.id = b.operation_id
WHERE o.id = $1 OR o.parent_id = $1;

-- name: backend_op_move
-- A fan-out job takes over an intent already queued for one of its nodes.
UPDATE pending_backend_ops SET operation_id = $4 WHERE node_id = $1 AND backend = $2 AND op = $3;

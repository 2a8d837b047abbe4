-- name: cluster_nodes
-- Healthy backend nodes with their memory facts and labels: what model sizing reads.
SELECT n.id, n.name, n.total_vram, n.vram_budget_bytes, n.total_ram, n.gpu_vendor, n.capability,
    COALESCE((SELECT jsonb_object_agg(l.key, l.value) FROM node_labels l WHERE l.node_id = n.id), '{}'::jsonb)::text
        AS labels
FROM backend_nodes n
WHERE n.status = 'healthy' AND n.node_type = 'backend'
ORDER BY n.name;

-- name: nodes_by_status
-- How many registered nodes are in each status (the /metrics node gauge).
SELECT status, count(*) AS n FROM backend_nodes GROUP BY status;

-- name: load_jobs_by_state
-- How many load jobs are in each state (the /metrics load-job gauge).
SELECT state, count(*) AS n FROM model_load_jobs GROUP BY state;

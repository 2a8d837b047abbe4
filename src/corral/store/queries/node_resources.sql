-- name: node_resources
-- Every registered node's status, memory and disk as its heartbeats last stored them (traffic series, /metrics).
SELECT id, name, status, total_vram, available_vram, total_ram, available_ram, total_disk, available_disk
FROM backend_nodes
ORDER BY name;

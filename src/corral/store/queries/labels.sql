-- name: labels_of_node
-- Every label of a node.
SELECT key, value FROM node_labels WHERE node_id = $1 ORDER BY key;

-- name: labels_clear
-- Remove every label of a node (the first half of a replace).
DELETE FROM node_labels WHERE node_id = $1;

-- name: label_delete
-- Remove one label of a node.
DELETE FROM node_labels WHERE node_id = $1 AND key = $2 RETURNING key;

-- name: label_catalog
-- Every label key the cluster reports with its distinct values (the UI's selector completion), bounded.
SELECT key, (array_agg(DISTINCT value ORDER BY value))[1:$2] AS label_values
FROM node_labels GROUP BY key ORDER BY key LIMIT $1;

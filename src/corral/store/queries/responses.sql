-- name: response_insert
-- Keep a response (the Responses API) for $6 seconds.
INSERT INTO responses (id, owner, body, input_items, messages, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6));

-- name: response_body
-- A live response's object, for the key that created it.
SELECT body FROM responses WHERE id = $1 AND owner = $2 AND expires_at > now();

-- name: response_input_items
-- A live response's input items, for the key that created it.
SELECT input_items FROM responses WHERE id = $1 AND owner = $2 AND expires_at > now();

-- name: response_messages
-- A live response's conversation (chat messages), for the key that created it: a follow-up's history.
SELECT messages FROM responses WHERE id = $1 AND owner = $2 AND expires_at > now();

-- name: response_delete
-- Delete a live response of this key; returns its id when there was one.
DELETE FROM responses WHERE id = $1 AND owner = $2 AND expires_at > now() RETURNING id;

-- name: responses_sweep
-- Delete up to $1 expired responses; returns how many went.
WITH gone AS (
    DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE expires_at <= now() LIMIT $1) RETURNING 1
)
SELECT count(*) FROM gone;

-- name: generated_image_insert
-- Keep a generated image (PNG bytes) for $3 seconds.
INSERT INTO generated_images (id, png, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3));

-- name: generated_image_png
-- A live generated image's PNG bytes.
SELECT png FROM generated_images WHERE id = $1 AND expires_at > now();

-- name: generated_images_sweep
-- Delete up to $1 expired generated images; returns how many went.
WITH gone AS (
    DELETE FROM generated_images WHERE id IN (SELECT id FROM generated_images WHERE expires_at <= now() LIMIT $1)
    RETURNING 1
)
SELECT count(*) FROM gone;

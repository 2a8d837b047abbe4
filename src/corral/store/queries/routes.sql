-- name: routes_all
-- Every model route, by name.
SELECT name, targets::text AS targets, fallbacks::text AS fallbacks, description,
       EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s
FROM model_routes ORDER BY name;

-- name: route_upsert
-- Create or replace a route.
INSERT INTO model_routes AS r (name, targets, fallbacks, description)
VALUES ($1, $2::jsonb, $3::jsonb, $4)
ON CONFLICT (name) DO UPDATE SET targets = EXCLUDED.targets, fallbacks = EXCLUDED.fallbacks,
    description = EXCLUDED.description, updated_at = now()
RETURNING name, targets::text AS targets, fallbacks::text AS fallbacks, description,
          EXTRACT(EPOCH FROM updated_at)::double precision AS updated_s;

-- name: route_delete
-- Remove a route; requests naming it get model_not_found again.
DELETE FROM model_routes WHERE name = $1 RETURNING name;

-- Model routes (issue 25 item 4): a name served by weighted targets with ordered fallbacks.
CREATE TABLE IF NOT EXISTS model_routes (
    name        varchar(255) PRIMARY KEY,
    targets     jsonb NOT NULL,                    -- [{"model": "...", "weight": 90}, ...]
    fallbacks   jsonb NOT NULL DEFAULT '[]'::jsonb, -- ["...", ...], tried in order
    description text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

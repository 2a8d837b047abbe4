-- Images of /v1/images/generations answered with response_format "url" (issue 23): kept until expires_at
-- (CORRAL_GENERATED_IMAGE_TTL; swept by the frontends) and served by any frontend at
-- GET /generated-images/<id>.png. The id is 32 random url-safe characters: knowing it is the permission, as
-- with OpenAI's signed image URLs.
CREATE TABLE IF NOT EXISTS generated_images (
    id          varchar(64) PRIMARY KEY,
    png         bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_generated_images_expires ON generated_images (expires_at);

-- The Responses API (issue 22): a stored response, for GET /v1/responses/{id} and a later request's
-- previous_response_id, kept until expires_at (CORRAL_RESPONSES_TTL; swept by the frontends). `owner` is the
-- sha256 of the API key that created it ('' for none): another key does not see it. `body` is the response
-- object as returned; `input_items` its request's input as items (GET /v1/responses/{id}/input_items);
-- `messages` the whole conversation up to and including it, as chat messages: all three JSON
-- text, never read inside by PostgreSQL (jsonb would refuse a "\u0000" that JSON and the models accept).
CREATE TABLE IF NOT EXISTS responses (
    id          varchar(64) PRIMARY KEY,
    owner       varchar(64) NOT NULL DEFAULT '',
    body        text NOT NULL,
    input_items text NOT NULL,
    messages    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_responses_expires ON responses (expires_at);

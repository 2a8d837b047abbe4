-- The Files and Batch APIs (issue 25): /v1/files and /v1/batches.
-- A file's bytes are kept here in chunks of up to 1 MiB (batch_file_chunks), so any frontend serves any file
-- and a batch survives the frontend that accepted it. `owner` is the sha256 of the API key that uploaded the
-- file or created the batch ('' for none): another key does not see it. Ids are made by the frontend, never
-- taken from a client; `filename` is the client's name, sanitized, kept as metadata only.
CREATE TABLE IF NOT EXISTS batch_files (
    id          varchar(64) PRIMARY KEY,
    owner       varchar(64) NOT NULL DEFAULT '',
    filename    text NOT NULL,
    purpose     varchar(32) NOT NULL,
    bytes       bigint NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_batch_files_owner ON batch_files (owner, created_at, id);

CREATE TABLE IF NOT EXISTS batch_file_chunks (
    file_id     varchar(64) NOT NULL REFERENCES batch_files (id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (file_id, seq)
);

-- A batch: status validating -> in_progress -> finalizing -> completed, or failed (validation), expired (past
-- expires_at), cancelling -> cancelled. Counts are updated as each line finishes (request_counts).
-- `tenant`, `key_id`: the caller its lines run as (tenancy/caller.py), at priority class "batch".
-- metadata and errors are JSON text (jsonb would refuse a "\u0000" that JSON accepts).
CREATE TABLE IF NOT EXISTS batches (
    id                  varchar(64) PRIMARY KEY,
    owner               varchar(64) NOT NULL DEFAULT '',
    tenant              text NOT NULL,
    key_id              text NOT NULL,
    endpoint            varchar(64) NOT NULL,
    input_file_id       varchar(64) NOT NULL,
    completion_window   varchar(16) NOT NULL,
    metadata            text,
    model               text,
    status              varchar(16) NOT NULL DEFAULT 'validating',
    errors              text,
    output_file_id      varchar(64),
    error_file_id       varchar(64),
    total               integer NOT NULL DEFAULT 0,
    completed           integer NOT NULL DEFAULT 0,
    failed              integer NOT NULL DEFAULT 0,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    in_progress_at      timestamptz,
    finalizing_at       timestamptz,
    completed_at        timestamptz,
    failed_at           timestamptz,
    expired_at          timestamptz,
    cancelling_at       timestamptz,
    cancelled_at        timestamptz
);
CREATE INDEX IF NOT EXISTS idx_batches_owner ON batches (owner, created_at, id);
CREATE INDEX IF NOT EXISTS idx_batches_open ON batches (created_at)
    WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');

-- One request line of an open batch: pending -> running (claimed by a frontend until lease_until, renewed while
-- it runs) -> done (ok: a 2xx answer; result: its output-file line). Deleted when the batch is finalized (the
-- results are then in its output and error files).
CREATE TABLE IF NOT EXISTS batch_lines (
    batch_id    varchar(64) NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    line        integer NOT NULL,
    custom_id   text NOT NULL,
    url         text NOT NULL,
    body        text NOT NULL,
    state       varchar(16) NOT NULL DEFAULT 'pending',
    lease_owner varchar(64),
    lease_until timestamptz,
    ok          boolean,
    result      text,
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX IF NOT EXISTS idx_batch_lines_open ON batch_lines (batch_id, line) WHERE state <> 'done';

-- Runtime settings shared by every frontend (e.g. distributed_disk_headroom_check); last write wins.
CREATE TABLE IF NOT EXISTS runtime_settings (
    key        varchar(128) PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Model config edits in commit order (issue 21): every committed change of a model's stored configuration
-- takes the next number, under the row's lock. A frontend applies a row to its files and memory only when
-- its number is above the one it holds, so every frontend follows the edits in the order they committed
-- and a restart takes the committed row, whatever the files' mtimes say.
ALTER TABLE model_config_states ADD COLUMN IF NOT EXISTS config_seq bigint NOT NULL DEFAULT 1;

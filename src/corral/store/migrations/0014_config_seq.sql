-- Model config edits in commit order (issue 21): every committed change of a model's stored configuration
-- takes the next number of one sequence, under the row's lock, so a model's numbers rise in the order its
-- changes committed (and keep rising when a row is deleted and established again). A frontend applies a
-- row to its files and memory only when its number is above the one it holds, and a restart takes the
-- committed row, whatever the files' mtimes say.
CREATE SEQUENCE IF NOT EXISTS model_config_seq;
ALTER TABLE model_config_states ADD COLUMN IF NOT EXISTS config_seq bigint NOT NULL
    DEFAULT nextval('model_config_seq');

-- How many trace entries an agent job published, as its result says (NULL while it runs, or from a worker
-- that does not say): a trace entry that arrives after the result is still recorded when its place is within it.
ALTER TABLE agent_jobs ADD COLUMN IF NOT EXISTS trace_count bigint;

-- name: usage_flush
-- Add one batch of counts (parallel arrays: key id, tenant, model, hour as unix seconds, requests, prompt, completion
-- and cached tokens) to the hourly rows and to each key's day totals: one statement per flush, never per request.
WITH batch AS (
    SELECT key_id, model, to_timestamp(hour_s) AS hour, max(tenant) AS tenant, sum(requests) AS requests,
           sum(prompt) AS prompt, sum(completion) AS completion, sum(cached) AS cached
    FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[],
                $8::bigint[]) AS b(key_id, tenant, model, hour_s, requests, prompt, completion, cached)
    GROUP BY key_id, model, hour_s
), hourly AS (
    INSERT INTO usage AS u (key_id, model, hour, tenant, requests, prompt_tokens, completion_tokens, cached_tokens)
    SELECT key_id, model, hour, tenant, requests, prompt, completion, cached FROM batch
    ON CONFLICT (key_id, model, hour) DO UPDATE SET
        tenant = EXCLUDED.tenant,
        requests = u.requests + EXCLUDED.requests,
        prompt_tokens = u.prompt_tokens + EXCLUDED.prompt_tokens,
        completion_tokens = u.completion_tokens + EXCLUDED.completion_tokens,
        cached_tokens = u.cached_tokens + EXCLUDED.cached_tokens
)
INSERT INTO usage_key_days AS d (key_id, day, tokens)
SELECT key_id, (hour AT TIME ZONE 'UTC')::date, sum(prompt + completion) FROM batch GROUP BY 1, 2
ON CONFLICT (key_id, day) DO UPDATE SET tokens = d.tokens + EXCLUDED.tokens;

-- name: usage_key_totals
-- Every key's tokens (prompt + completion) on the UTC day $1 and in the month from the UTC date $2.
SELECT key_id,
       coalesce(sum(tokens) FILTER (WHERE day >= $1::date), 0)::bigint AS day_tokens,
       sum(tokens)::bigint AS month_tokens
FROM usage_key_days WHERE day >= $2::date GROUP BY key_id;

-- name: usage_report
-- Usage summed over the hourly rows matching the filters (NULL: any): key $1, tenant $2, model $3, hour in
-- [$4, $5); grouped by key ($6), tenant ($7), model ($8), period $9 ('hour', 'day' or NULL: none); at most $10 groups.
SELECT CASE WHEN $6::boolean THEN u.key_id END AS key_id,
       CASE WHEN $6::boolean THEN max(k.name) END AS key_name,
       CASE WHEN $7::boolean THEN u.tenant END AS tenant,
       CASE WHEN $8::boolean THEN u.model END AS model,
       date_trunc($9::text, u.hour, 'UTC') AS period,
       sum(u.requests)::bigint AS requests,
       sum(u.prompt_tokens)::bigint AS prompt_tokens,
       sum(u.completion_tokens)::bigint AS completion_tokens,
       sum(u.cached_tokens)::bigint AS cached_tokens
FROM usage u LEFT JOIN api_keys k ON k.id = u.key_id
WHERE ($1::text IS NULL OR u.key_id = $1) AND ($2::text IS NULL OR u.tenant = $2)
  AND ($3::text IS NULL OR u.model = $3) AND u.hour >= $4 AND u.hour < $5
GROUP BY 1, 3, 4, 5
ORDER BY period NULLS FIRST, key_id NULLS FIRST, tenant NULLS FIRST, model NULLS FIRST
LIMIT $10;

-- name: usage_sweep
-- Delete up to $1 hourly rows older than $2 seconds (CORRAL_USAGE_RETENTION); how many went.
WITH gone AS (
    DELETE FROM usage WHERE ctid IN (
        SELECT ctid FROM usage WHERE hour < now() - make_interval(secs => $2::double precision) LIMIT $1)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: usage_key_days_sweep
-- Delete up to $1 day totals older than $2 seconds (at least the quotas' two months are always kept); how many.
WITH gone AS (
    DELETE FROM usage_key_days WHERE ctid IN (
        SELECT ctid FROM usage_key_days
        WHERE day < (now() AT TIME ZONE 'UTC' - make_interval(secs => $2::double precision))::date LIMIT $1)
    RETURNING 1
)
SELECT count(*) FROM gone;

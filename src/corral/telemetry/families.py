"""The Prometheus metric families of corral: one definition each, in the process-wide registry.

Label values are bounded: `model` is a configured model name or `other` (`labels.ModelLabels`),
`status` an HTTP status code, `node` a registered node name. Figures that need a database read
(nodes by status, load jobs by state, pool use) and the in-flight count per replica are read at
scrape time by `control.cluster_figures`, never per request.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

disable_created_metrics()  # no `*_created` twin of every counter and histogram: half the series, same facts

OTHER_MODEL = "other"  # the `model` label of a request naming no configured model

# Request latency: a warm tiny request is ~1 ms through the frontend, a long generation minutes.
LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# A load: seconds for a tiny model already on the node, many minutes for a large checkpoint.
LOAD_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
THROUGHPUT_BUCKETS_BPS = tuple(float(1 << p) for p in range(20, 36, 2))  # 1 MiB/s … 32 GiB/s

REQUESTS = Counter(
    "corral_requests", "Inference requests (/v1) answered, by model and HTTP status", ["model", "status"]
)
REQUEST_SECONDS = Histogram(
    "corral_request_duration_seconds",
    "Inference request latency (/v1), from the body read to the last byte sent",
    ["model", "status"],
    buckets=LATENCY_BUCKETS_S,
)
FIRST_TOKEN_SECONDS = Histogram(
    "corral_time_to_first_token_seconds",
    "Streamed requests: time from routing to the first reply of the backend",
    ["model"],
    buckets=LATENCY_BUCKETS_S,
)
STREAMED_TOKENS = Counter(
    "corral_streamed_tokens", "Completion tokens relayed in streamed responses", ["model"]
)
ROUTING_DECISIONS = Counter(
    "corral_routing_decisions",
    "Routing decisions: warm (a loaded replica), cold (a load was waited for), "
    "evict (a replica stopped to make room)",
    ["model", "decision"],
)

LOAD_SECONDS = Histogram(
    "corral_load_duration_seconds",
    "Load jobs run by this frontend, start to outcome",
    ["model", "outcome"],
    buckets=LOAD_BUCKETS_S,
)
LOAD_PHASE_SECONDS = Histogram(
    "corral_load_phase_duration_seconds",
    "Time load jobs spent in each phase (pending, installing, staging, loading)",
    ["phase"],
    buckets=LOAD_BUCKETS_S,
)

STAGING_BYTES = Counter("corral_staging_bytes", "Model file bytes sent to workers' file servers")
STAGING_THROUGHPUT = Histogram(
    "corral_staging_throughput_bytes_per_second",
    "Throughput of each file staged to a worker (bytes sent / seconds spent sending)",
    buckets=THROUGHPUT_BUCKETS_BPS,
)

HEARTBEAT_WRITES = Counter(
    "corral_heartbeat_writes", "Worker heartbeats written to PostgreSQL by this frontend"
)
NATS_RECONNECTS = Counter("corral_nats_reconnects", "NATS connections restored after a loss", ["client"])

# Slow and hostile clients (issue 21): counted where they are shed, never per request.
HTTP_CONNECTIONS_REFUSED = Counter(
    "corral_http_connections_refused",
    "HTTP connections answered 503 and closed at once: the process held CORRAL_MAX_CONNECTIONS",
)
HTTP_HEADERS_TOO_LARGE = Counter(
    "corral_http_headers_too_large",
    "HTTP requests answered 431 and closed: their line and headers passed CORRAL_HTTP_MAX_HEADER_BYTES",
)
HTTP_REQUEST_TIMEOUTS = Counter(
    "corral_http_request_timeouts",
    "HTTP connections closed because a request did not arrive in time, by phase: "
    "first_byte (nothing sent), headers (408, CORRAL_HTTP_HEADER_TIMEOUT), body (408, "
    "CORRAL_HTTP_BODY_TIMEOUT)",
    ["phase"],
)


class HttpGuardCounters:
    """The embedded HTTP server's guard (`runtime.httpguard`) counted in the families above."""

    def refused(self) -> None:
        HTTP_CONNECTIONS_REFUSED.inc()

    def headers_too_large(self) -> None:
        HTTP_HEADERS_TOO_LARGE.inc()

    def timed_out(self, phase: str) -> None:
        HTTP_REQUEST_TIMEOUTS.labels(phase).inc()


HTTP_GUARD = HttpGuardCounters()
AUTH_FAILURES = Counter(
    "corral_auth_failures",
    "Requests refused for their API key, by outcome: unknown (a new key, looked up: not found), "
    "known_wrong (a key already known wrong, answered from memory), throttled (429: the "
    "source presented CORRAL_AUTH_FAILURE_LIMIT unknown keys in its window; nothing looked up)",
    ["outcome"],
)
API_KEY_LOOKUPS = Counter("corral_api_key_lookups", "API keys looked up in PostgreSQL (a key not in memory)")
NODE_REGISTRATIONS_REFUSED = Counter(
    "corral_node_registrations_refused",
    "Node registrations answered 429, by reason: rate (CORRAL_NODE_REGISTER_RATE "
    "from one source), pending_cap (CORRAL_MAX_PENDING_NODES)",
    ["reason"],
)

# The router queue (routing/queue.py): only requests that wait touch these; the warm path never does.
QUEUE_DEPTH = Gauge(
    "corral_queue_depth",
    "Requests waiting in this frontend's queue for a free replica slot of the model",
    ["model"],
)
QUEUE_WAIT = Histogram(
    "corral_queue_wait_seconds",
    "Time a request waited in the router queue before it got a replica slot",
    ["model", "priority"],
    buckets=LATENCY_BUCKETS_S,
)
QUEUE_REFUSED = Counter(
    "corral_queue_refused",
    "Requests the router queue refused: full (CORRAL_QUEUE_MAX_DEPTH) or waited past CORRAL_QUEUE_TIMEOUT",
    ["model", "reason"],
)

# Usage accounting (tenancy/ledger.py): counted from the engine's own counts, published at each flush, never per
# request. No tenant or key label: their number is not bounded (GET /api/usage has them).
USAGE_TOKENS = Counter(
    "corral_usage_tokens",
    "Tokens served as the engine counted them, by model and kind (prompt, completion, cached: the part of the "
    "prompt served from the engine's cache)",
    ["model", "kind"],
)
USAGE_REQUESTS = Counter(
    "corral_usage_requests", "Backend calls that reported token counts, by model", ["model"]
)
USAGE_FLUSH_FAILURES = Counter(
    "corral_usage_flush_failures",
    "Usage flushes to PostgreSQL that failed; their counts are kept for the next flush",
)
USAGE_DROPPED_ROWS = Counter(
    "corral_usage_dropped_rows",
    "Pending key x model x hour usage rows dropped, oldest first, because PostgreSQL could not take them before "
    "CORRAL_USAGE_MAX_PENDING rows were waiting",
)

# API keys' policy (tenancy/policy.py, tenancy/limits.py): requests refused by a key's models, limits or quotas.
KEY_REFUSALS = Counter(
    "corral_key_refusals",
    "Requests refused by their API key's policy: model_not_allowed (its models), rate_limit_exceeded (its "
    "requests or tokens per minute), insufficient_quota (its tokens per day or month)",
    ["reason"],
)

# Circuit breakers and retries of backend calls (routing/breaker.py, routing/calls.py): failures only, never the
# warm path. Breakers are per frontend: each frontend counts its own transitions.
BREAKER_TRANSITIONS = Counter(
    "corral_breaker_transitions",
    "Replica circuit breakers changing state on this frontend, by model and new state (open: taken out of picking "
    "for CORRAL_BREAKER_COOLDOWN; half_open: one trial request let through; closed: serving again)",
    ["model", "to"],
)
BACKEND_RETRIES = Counter(
    "corral_backend_retries",
    "Backend calls retried before their first byte, by model and reason (gone: the replica stopped serving; "
    "unavailable: UNAVAILABLE from a live replica; breaker_open: the failure opened the replica's breaker)",
    ["model", "reason"],
)

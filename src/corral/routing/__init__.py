"""The warm path of a request: which replica serves it and how the backend is called.

`router` routes (the in-memory view of `replica`/`local_replicas`, one picker of `pickers`, else the
cold path of `loading`), `calls` makes the backend call within its budgets and retries a vanished
replica once, `errors` says what failed. `backend_client.BackendChannels` holds one gRPC channel per
backend address and, when the backend advertises one, its fast lane (`corral.lane`); `caller()` gives a
`backend_caller.BackendCaller`, the same call shape over either transport, so nothing above it knows
which one served. `inflight`, `events`, `prefix_index`/`prefix_sync` keep the frontends' views in
step over NATS; `eviction` makes room on a node without stopping a replica that is serving.
"""

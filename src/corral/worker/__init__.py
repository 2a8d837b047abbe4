"""The worker (`corral worker`): NATS handlers of `nodes.<id>.*` (backend and model operations, files, logs),
the backend supervisor with its ports, liveness and readiness, and drain. What other node agents share is in
`node`; only `up` imports this package.
"""

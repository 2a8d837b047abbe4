"""Backend processes (`corral backend NAME --addr H:P`): one model replica each, served over gRPC.

`main` starts one, `server` runs the `grpc.aio` server (bearer `auth`, `tracing_interceptor`,
`parent_watch`) around `servicer.BackendServicer`, which admits calls and runs the `engine` (the
built-in `llama_*` engine on llama-cpp-python, the `simulator` for tests and benchmarks) one call at
a time, streaming through `reply_pump`. Beside gRPC, `server` starts the fast lane's server
(`corral.lane.server`) around the same servicer and advertises its port on `Status`: the four hot RPCs
then reach the same servicer over either transport.
"""

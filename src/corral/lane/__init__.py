"""corral.lane — the fast lane: a multiplexed binary protocol beside gRPC for the hot backend RPCs.

corral's own backends serve `Predict`, `PredictStream`, `Embedding` and `TokenizeString` twice: over
gRPC (what every backend speaks, reference backends included) and over this lane, one plain TCP
connection per frontend and backend carrying length-prefixed protobuf frames. Its semantics are
gRPC's — the same request and reply messages, the same status codes and details — at a few µs of
client CPU per call instead of a grpc.aio call's hundreds.

* `frames`: the wire format (frame header, kinds, method codes, error frames, reader/writer);
* `client`: the frontend's side, `LaneConnection`, used by `routing.backend_client.BackendChannels`
  once the backend advertised its port on `Status`;
* `server`: the backend's side, `LaneServer`, started by `backends.server` next to the gRPC server
  around the same servicer.

Routing uses the client (`routing.backend_client.BackendChannels.caller()` returns it as a
`routing.backend_caller.BackendCaller`, as it returns the gRPC stub), backends serve it; this package
imports neither. The protocol — frames, ids, handshake and auth, cancel, deadlines, keepalive, flow
control, errors as gRPC statuses, tracing (a TRACE frame carries the W3C trace context, so tracing never
changes the transport), versioning — is written down in `PROTOCOL.md` beside this file, with the
places where it differs from gRPC. One conformance suite (`tests/integration/lane/test_conformance.py`)
runs the same behaviours against both transports.
"""

"""The frontend's side of the node lifecycle: heartbeats and when they reach PostgreSQL (`heartbeat_rules`,
`heartbeats`, `held_beats`), the health monitor and its status transitions (`health_monitor`, `status`),
node events between frontends (`events`), durable backend operations on nodes (`backend_ops`), all built
once at start (`lifecycle`). It serves no HTTP: `frontend.node_api` and `frontend.admin` do.
"""

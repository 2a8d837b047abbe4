"""corral: distributed LLM serving — frontends, workers and backend processes.

The packages, from the commands down (an arrow is "may import"; `tests/unit/test_package_map.py` holds
the code to it):

    cli, up                 the command line; `corral up` (the only importer of `worker`)
      -> frontend, worker, agents, launchers
                            the processes: the frontend's ASGI app (inference/, admin/, node_api/), the
                            worker, the agent worker, the followers
      -> routing, replicas, revisions, nodes, loading
                            the frontend's parts: the warm path, replica upkeep, config revisions, node
                            lifecycle, durable loads (loading never imports routing)
      -> node, backends, gallery, staging, placement, store, bus, lane, grammar, telemetry, proto, tenancy
                            what a node agent shares; backend processes; installable backends; file
                            transfer; the pure scheduling pipeline; PostgreSQL; NATS; the fast lane; who
                            calls (tenant, key, priority class), their keys' policy and usage
      -> models, config, runtime
                            model configs and names; settings; process plumbing (loops, loop watch,
                            HTTP server, process helpers)

No package cycle.
"""

__version__ = "0.1.0"

from corral import native as _native

_native.guard()

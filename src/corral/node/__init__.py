"""What every node agent shares (the worker, the agent worker, the launchers' followers): the HTTP calls to
a frontend's `/api/node/*` (`registration`), NATS credentials (`credentials`), the node's own credential on
disk (`node_credential`), the hardware facts it reports (`hardware`), the one heartbeat loop they all run
(`heartbeat`), a follower's presence in the registry (`presence`) and the errors they raise (`errors`). It
never imports `worker`.
"""

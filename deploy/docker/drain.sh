#!/bin/sh
# corral-drain: the preStop hook. SIGTERM the corral process the entrypoint recorded and wait until it
# has exited. On SIGTERM a worker drains: it stops taking work, waits (at most CORRAL_DRAIN_TIMEOUT) for
# in-flight requests to finish and deregisters; a frontend stops accepting and gives open requests 5 s.
# The pod's terminationGracePeriodSeconds must be longer than that drain, or the kubelet kills it first.
set -u
pid_file="${CORRAL_RUN_DIR:-/tmp}/corral.pid"
[ -f "$pid_file" ] || exit 0
pid="$(cat "$pid_file")"
kill -TERM "$pid" 2>/dev/null || exit 0
while kill -0 "$pid" 2>/dev/null; do
    sleep 1
done
exit 0

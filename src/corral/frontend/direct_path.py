"""The inference fast path's common case, served without the ASGI layers around it.

A POST to an inference route (`fast_path`'s table) is normally met by `limits`, then `access`, then the fast path:
three ASGI calls, each awaiting the next, each deciding something. For the common case each decision is known
before the body is read, from memory, with no side effect: a declared length within the limit and the frontend
below its concurrency limit (`RequestLimitsMiddleware.direct_admit`), and either no key needed or a fresh good
key without rate limits, quotas or a priority header (`AccessControl.direct_access`). The HTTP server asks
`route` when a request's headers are whole (runtime/httpguard.py); when it answers, `serve` runs the request as
the layers would have (counted in flight, as the key's caller) and hands it to the fast path's own
`respond_to`. Every other request, and every refusal, takes the layers, whose answers stay the only ones.

A warm chat request goes further (hot_path.py): the server `holds` it until its body is whole and offers it to
`take`, which answers it from callbacks, without a task; what `take` declines is served as above.
"""

from __future__ import annotations

import time
from typing import Any

from corral.frontend.access import AccessControl, KeyAccess
from corral.frontend.hot_path import HotPath
from corral.frontend.inference.fast_path import FastPath, InferenceRoute, Receive, Scope, Send, read_body
from corral.frontend.limits import RequestLimitsMiddleware
from corral.runtime.httpguard import LeanCycle
from corral.tenancy.caller import CURRENT
from corral.tenancy.policy import CURRENT_POLICY

Direct = tuple[InferenceRoute[Any], KeyAccess | None, int]  # the route, the key's access, the declared length


class DirectPath:
    def __init__(
        self,
        limits: RequestLimitsMiddleware,
        access: AccessControl,
        fast: FastPath,
        hot: HotPath | None = None,
    ) -> None:
        self.limits, self.access, self.fast, self.hot = limits, access, fast, hot

    def route(self, scope: Scope) -> Direct | None:
        """The request's route and key access when the layers would pass it straight through; else None."""
        if scope["method"] != "POST":
            return None
        handler = self.fast.handlers.get(scope["path"])
        if handler is None:
            return None
        declared = self.limits.direct_admit(scope)
        if declared is None:
            return None
        access = self.access.direct_access(scope)
        return None if access is None else (handler, access[0], declared)

    def holds(self, direct: Direct, max_body: int) -> bool:
        """Whether the server should wait for the body (at most `max_body` bytes) and offer it to `take`."""
        return self.hot is not None and direct[2] <= max_body and self.hot.holds(direct[0])

    def take(self, cycle: LeanCycle, direct: Direct) -> bool:
        """The request answered from callbacks (hot_path.py); False: nothing taken, `serve` it."""
        return self.hot is not None and self.hot.take(cycle, direct[0], direct[1])

    async def serve(self, scope: Scope, receive: Receive, send: Send, direct: Direct) -> None:
        handler, access, _ = direct
        started_s = time.perf_counter()
        self.limits.in_flight += 1
        try:
            if access is not None:  # this task's own context: nothing to reset
                CURRENT.set(access.caller)
                CURRENT_POLICY.set(access.policy)
            await self.fast.respond_to(scope, receive, send, handler, await read_body(receive), started_s)
        finally:
            self.limits.in_flight -= 1

"""The caller of the request being served: set once per request by the access layer (frontend/access.py), read
by routing without being passed through every handler (a `ContextVar`: tasks started by the request inherit it).

Priority classes, most urgent first. A key's class is its ceiling: a request may ask for a lower class with the
`x-corral-priority` header, never a higher one. The Batch API runs its work as `batch`, below every interactive
class, so batch work only fills capacity nobody interactive is waiting for.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

PRIORITY_CLASSES: tuple[str, ...] = ("critical", "high", "normal", "low", "batch")
PRIORITY_RANK = {name: rank for rank, name in enumerate(PRIORITY_CLASSES)}
DEFAULT_PRIORITY = "normal"
PRIORITY_HEADER = b"x-corral-priority"
ANONYMOUS_TENANT = "anonymous"  # auth off, or a request no key names (health checks, the UI's own calls)


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str = ANONYMOUS_TENANT
    key_id: str = ""  # the api_keys row id; "" when the request carried no key
    priority: str = DEFAULT_PRIORITY
    labels: dict[str, str] = field(default_factory=dict)  # free-form, never routed on

    @property
    def rank(self) -> int:
        """0 is served first."""
        return PRIORITY_RANK[self.priority]

    def lowered_to(self, asked: str) -> Caller:
        """This caller at the class `asked` when that is not above its own (a key's class is its ceiling)."""
        if asked not in PRIORITY_RANK or PRIORITY_RANK[asked] <= self.rank:
            return self
        return Caller(self.tenant, self.key_id, asked, self.labels)


ANONYMOUS = Caller()
CURRENT: ContextVar[Caller] = ContextVar("corral_caller", default=ANONYMOUS)


def current() -> Caller:
    return CURRENT.get()

"""What an API key may do (issue 25): the tenant it bills to, the models it may call, its rate limits, its token
quotas and its priority class — read with the key's role in the one lookup the access layer makes per key
(frontend/access.py), kept in its key cache, and set for the request next to its `Caller` (`CURRENT_POLICY`).

Allowed models are names and shell-style globs (`fnmatch`, case-sensitive: `llama-*`, `qwen2.5:?b`); an empty
list allows every model. A request may name a model or an alias of one: it is allowed when either name is.
0 (or an absent field) is unlimited for every limit and quota.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from corral.models.names import ALLOWED, NAME_MAX_CHARS
from corral.tenancy.caller import DEFAULT_PRIORITY, PRIORITY_CLASSES, Caller

MODELS_MAX = 256  # entries in one key's model list: an operator names a handful of models or families
LIMIT_MAX = (1 << 63) - 1  # the columns are bigint
GLOB_CHARS = frozenset("*?[]")
_ENTRY_RE = re.compile(r"[A-Za-z0-9._:@+*?\[\]!-]+")  # a model name's characters, and the glob's
LIMIT_FIELDS = ("rpm", "tpm", "tokens_per_day", "tokens_per_month")

REFUSED_MODEL = "model_not_allowed"


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    key_id: str
    name: str = ""
    tenant: str = ""  # "" bills to the key's name
    models: tuple[str, ...] = ()  # names and globs; () allows every model
    rpm: int = 0  # requests per minute; 0 unlimited
    tpm: int = 0  # tokens per minute (prompt + completion)
    tokens_per_day: int = 0  # per UTC day
    tokens_per_month: int = 0  # per UTC calendar month
    priority: str = DEFAULT_PRIORITY
    _exact: frozenset[str] = field(init=False, repr=False, compare=False)
    _globs: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        exact = frozenset(m for m in self.models if GLOB_CHARS.isdisjoint(m))
        globs = [fnmatch.translate(m) for m in self.models if not GLOB_CHARS.isdisjoint(m)]
        object.__setattr__(self, "_exact", exact)
        object.__setattr__(self, "_globs", re.compile("|".join(globs)) if globs else None)

    @property
    def billed_tenant(self) -> str:
        return self.tenant or self.name or self.key_id

    @property
    def limited(self) -> bool:
        """Rate-limited per minute: its responses carry the x-ratelimit-* headers."""
        return bool(self.rpm or self.tpm)

    @property
    def metered(self) -> bool:
        """Any limit or quota to check per request (a key with none pays nothing for them)."""
        return bool(self.rpm or self.tpm or self.tokens_per_day or self.tokens_per_month)

    def caller(self) -> Caller:
        return Caller(self.billed_tenant, self.key_id, self.priority)

    def allows(self, model: str) -> bool:
        if not self.models or model in self._exact:
            return True
        return self._globs is not None and self._globs.fullmatch(model) is not None


def policy_of(row: Mapping[str, Any]) -> KeyPolicy:
    """A key's policy from its `api_keys` row (store/api_keys.py `access_of`, the listing, an update)."""
    return KeyPolicy(
        key_id=str(row["id"]),
        name=str(row["name"]),
        tenant=str(row["tenant"]),
        models=tuple(row["models"] or ()),
        rpm=int(row["rpm"]),
        tpm=int(row["tpm"]),
        tokens_per_day=int(row["tokens_per_day"]),
        tokens_per_month=int(row["tokens_per_month"]),
        priority=str(row["priority"]) if row["priority"] in PRIORITY_CLASSES else DEFAULT_PRIORITY,
    )


CURRENT_POLICY: ContextVar[KeyPolicy | None] = ContextVar("corral_key_policy", default=None)
# The targets of a model route the key was allowed (frontend/inference/routes.py): the operator's route grants
# what it leads to, so a key listing a route needs no entry for each of its targets.
GRANTED_BY_ROUTE: ContextVar[frozenset[str]] = ContextVar("corral_granted_by_route", default=frozenset())


def model_refusal(model: str, alias_of: str = "") -> str | None:
    """Why the current request's key may not call `model` (`alias_of`: the model an alias names), or None.
    No key (auth off), or a key with no model list: every model."""
    policy = CURRENT_POLICY.get()
    if policy is None or policy.allows(model) or (alias_of and policy.allows(alias_of)):
        return None
    if model in GRANTED_BY_ROUTE.get():
        return None
    from corral.telemetry.families import KEY_REFUSALS

    KEY_REFUSALS.labels(REFUSED_MODEL).inc()
    return (
        f"the API key {policy.name or policy.key_id!r} may not use model {model[:NAME_MAX_CHARS]!r}; its models: "
        f"{', '.join(policy.models)} (PATCH /api/keys/{policy.key_id} with `models` to change them)"
    )


def allowed_names(names: Iterable[str]) -> list[str]:
    """The names the current request's key may use (all of them without a key or a model list)."""
    policy = CURRENT_POLICY.get()
    if policy is None or not policy.models:
        return list(names)
    return [n for n in names if policy.allows(n)]


# Validation of the admin API's fields: each returns the value or raises ValueError saying what is wrong.


def model_entry_problem(entry: object) -> str | None:
    if not isinstance(entry, str) or not entry:
        return "must be a non-empty model name or glob"
    shown = entry if len(entry) <= 64 else f"{entry[:64]}…"
    if len(entry) > NAME_MAX_CHARS:
        return f"must be at most {NAME_MAX_CHARS} characters, got {len(entry)} ({shown!r})"
    if _ENTRY_RE.fullmatch(entry) is None:
        return f"{shown!r} may contain only {ALLOWED}, and the glob characters * ? [ ] !"
    return None


def check_models(entries: Sequence[str]) -> tuple[str, ...]:
    if len(entries) > MODELS_MAX:
        raise ValueError(f"at most {MODELS_MAX} model names or globs, got {len(entries)}")
    for i, entry in enumerate(entries):
        problem = model_entry_problem(entry)
        if problem is not None:
            raise ValueError(f"entry {i}: {problem}")
    return tuple(dict.fromkeys(entries))  # duplicates once, in order


def check_limit(value: int) -> int:
    if isinstance(value, bool) or not 0 <= value <= LIMIT_MAX:
        raise ValueError(f"must be between 0 (unlimited) and {LIMIT_MAX}")
    return value


def check_priority(value: str) -> str:
    if value not in PRIORITY_CLASSES:
        raise ValueError(f"unknown priority class {value[:32]!r}; one of {', '.join(PRIORITY_CLASSES)}")
    return value

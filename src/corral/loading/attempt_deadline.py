"""LoadModel deadline derived from the checkpoint size (specification: "The model load deadline scales")."""

from __future__ import annotations

from corral.config.parse import format_duration_s
from corral.config.sizes import format_size

LOAD_BASE_S = 5 * 60.0
LOAD_PER_GIB_S = 20.0
LOAD_CAP_S = 6 * 3600.0
GIB = 1 << 30
LOAD_TIMEOUT_KNOB = "LOCALAI_NATS_MODEL_LOAD_TIMEOUT"


def load_budget_s(checkpoint_bytes: int, override_s: float | None = None) -> float:
    """`override` verbatim if set; else 5m + 20s per GiB (fractional), capped at 6h; no files ⇒ 5m."""
    if override_s is not None and override_s > 0:
        return override_s
    return min(LOAD_BASE_S + LOAD_PER_GIB_S * checkpoint_bytes / GIB, LOAD_CAP_S)


def deadline_message(model: str, budget_s: float, checkpoint_bytes: int, overridden: bool) -> str:
    origin = (
        f"set by {LOAD_TIMEOUT_KNOB}"
        if overridden
        else f"derived from a {format_size(checkpoint_bytes, binary=True)} checkpoint (5m + 20s/GiB)"
    )
    return (
        f"loading model {model}: LoadModel did not finish within {format_duration_s(budget_s)} ({origin}); "
        f"raise {LOAD_TIMEOUT_KNOB} if this model legitimately loads slower"
    )

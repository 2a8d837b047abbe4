"""Read one sample of a running process's `/metrics` (Prometheus text)."""

from __future__ import annotations

import re

import httpx


def metric_value(url: str, sample: str) -> float:
    """The value of `sample` (a name with its labels as exposed, e.g. `x_total{phase="headers"}`); 0 when absent."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0

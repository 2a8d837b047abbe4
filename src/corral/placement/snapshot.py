"""Immutable view of the schedulable nodes, built once per placement decision."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeSnapshot:
    id: str
    name: str
    address: str
    http_address: str
    loaded_models: int = 0
    in_flight: int = 0
    available_vram: int = 0
    model_names: frozenset[str] = frozenset()

"""Advisory-lock keys, as named constants in one place (reference §2.10)."""

from __future__ import annotations

KEY_HEALTH_CHECK = 104
KEY_SCHEMA_MIGRATE = 105
KEY_STATE_RECONCILER = 107

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK_64 = (1 << 64) - 1


def key_from_string(name: str) -> int:
    """`int64(fnv1a_64(name) >> 1) | 0x1_0000_0000` — the reference's string→key derivation."""
    value = _FNV_OFFSET
    for byte in name.encode():
        value = ((value ^ byte) * _FNV_PRIME) & _MASK_64
    return (value >> 1) | 0x1_0000_0000


KEY_REPLICA_RECONCILER = key_from_string("replica-reconciler")  # try-lock: one reconciler pass at a time
KEY_SCHEDULING_RULES = key_from_string("scheduling-rules")  # xact lock: rule conflict check + write
KEY_PENDING_NODES = key_from_string("pending-nodes")  # xact lock: the pending cap's count + insert
KEY_MODEL_ROUTES = key_from_string("model-routes")  # xact lock: a route's reference and cycle check + write

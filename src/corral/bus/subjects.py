"""NATS subject builders (reference §3). Tokens are sanitised so IDs cannot inject wildcards."""

from __future__ import annotations

_UNSAFE = str.maketrans({".": "-", "*": "-", ">": "-", " ": "-", "\t": "-", "\n": "-"})


def token(value: str) -> str:
    return value.translate(_UNSAFE)


def node_subject(node_id: str, suffix: str) -> str:
    return f"nodes.{token(node_id)}.{suffix}"


def backend_install(node_id: str) -> str:
    return node_subject(node_id, "backend.install")


def backend_install_progress(node_id: str, op_id: str) -> str:
    return node_subject(node_id, f"backend.install.{token(op_id)}.progress")


def backend_upgrade(node_id: str) -> str:
    return node_subject(node_id, "backend.upgrade")


def backend_delete(node_id: str) -> str:
    return node_subject(node_id, "backend.delete")


def backend_list(node_id: str) -> str:
    return node_subject(node_id, "backend.list")


def backend_stop(node_id: str) -> str:
    return node_subject(node_id, "backend.stop")


def model_stop(node_id: str) -> str:
    return node_subject(node_id, "model.stop")


def models_running(node_id: str) -> str:
    return node_subject(node_id, "models.running")


def node_stop(node_id: str) -> str:
    return node_subject(node_id, "stop")

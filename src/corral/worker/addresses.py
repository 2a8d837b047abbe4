"""Resolve a worker's gRPC base port, port range and advertised addresses (reference §6.2)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from corral.config.parse import parse_host_port

DEFAULT_BASE_PORT = 50051
MAX_PORT = 65535


@dataclass(frozen=True)
class WorkerAddresses:
    base_port: int
    max_port: int
    advertise_host: str
    advertise_grpc: str
    http_bind: tuple[str, int]
    advertise_http: str
    serve_host: str = "0.0.0.0"  # every listener the worker starts binds here (host of --serve-addr)


def _port_of(addr: str) -> int | None:
    if not addr:
        return None
    try:
        return parse_host_port(addr)[1]
    except ValueError:
        return None


def _host_of(addr: str) -> str:
    try:
        return parse_host_port(addr)[0] if addr else ""
    except ValueError:
        return ""


def resolve_max_port(base_port: int, configured: int) -> int:
    """Top of the range: clamped at 65535; unset, ≤0 or below the base port ⇒ the full range."""
    if configured <= 0 or configured < base_port:
        return MAX_PORT
    return min(configured, MAX_PORT)


def resolve_addresses(
    *,
    addr: str,
    serve_addr: str,
    grpc_max_port: int,
    http_addr: str,
    advertise_addr: str,
    advertise_http_addr: str,
    hostname: str | None = None,
) -> WorkerAddresses:
    base_port = _port_of(addr) or _port_of(serve_addr) or DEFAULT_BASE_PORT
    serve_host = _host_of(serve_addr) or "0.0.0.0"
    host = hostname or socket.gethostname()
    advertise_grpc = advertise_addr or addr or f"{host}:{base_port}"
    advertise_host = parse_host_port(advertise_grpc)[0] or host
    if http_addr:
        http_bind = parse_host_port(http_addr)
    else:
        http_bind = (serve_host, base_port - 1)
    advertise_http = advertise_http_addr or f"{advertise_host}:{base_port - 1}"
    return WorkerAddresses(
        base_port=base_port,
        max_port=resolve_max_port(base_port, grpc_max_port),
        advertise_host=advertise_host,
        advertise_grpc=advertise_grpc,
        http_bind=http_bind,
        advertise_http=advertise_http,
        serve_host=serve_host,
    )

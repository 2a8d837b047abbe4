"""NATS connection: reconnect forever, report link state, typed request helper."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats
from nats.aio.client import Client
from nats.errors import NoRespondersError, TimeoutError

from corral.bus.messages import Message
from corral.bus.security import NatsCredentials, TlsFiles
from corral.telemetry.families import NATS_RECONNECTS

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)


class BusError(Exception):
    """A NATS request failed; the message names the subject and the cause."""


class RequestTimeout(BusError):
    """The request was delivered (or at least not refused) but no reply came within the timeout."""


class NoResponders(BusError):
    """Nobody listens on the subject: the worker is gone from the bus (not merely slow)."""


async def connect(
    url: str,
    name: str,
    on_state: Callable[[bool], Awaitable[None]] | None = None,
    *,
    credentials: NatsCredentials | None = None,
    tls: TlsFiles | None = None,
) -> Client:
    async def disconnected() -> None:
        log.warning("NATS link down (%s); reconnecting", name)
        if on_state:
            await on_state(False)

    async def reconnected() -> None:
        NATS_RECONNECTS.labels(name).inc()
        log.info("NATS link restored (%s)", name)
        if on_state:
            await on_state(True)

    async def error(exc: Exception) -> None:
        log.debug("NATS error (%s): %s", name, exc)

    NATS_RECONNECTS.labels(name)  # exported at 0 from the start
    options: dict[str, object] = dict(credentials.connect_options()) if credentials else {}
    ssl_context = (tls or TlsFiles()).context(url)
    if ssl_context is not None:
        options["tls"] = ssl_context
    return await nats.connect(
        servers=url.split(","),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        connect_timeout=5,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
        **options,
    )


async def request(
    nc: Client,
    subject: str,
    payload: Message,
    reply_type: type[M],
    timeout_s: float,
    knob: str,
    *,
    headers: dict[str, str] | None = None,
) -> M:
    """`headers`: NATS message headers (the W3C trace context of the caller's span)."""
    try:
        msg = await nc.request(subject, payload.to_json(), timeout=timeout_s, headers=headers)
    except NoRespondersError:
        raise NoResponders(
            f"no worker is listening on {subject} (worker offline or not connected to NATS)"
        ) from None
    except TimeoutError:
        raise RequestTimeout(
            f"no reply on {subject} within {timeout_s:g}s; raise {knob} if the worker is slow"
        ) from None
    return reply_type.from_json(msg.data)

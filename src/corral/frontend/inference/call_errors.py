"""Errors of a routed backend call (routing, loading, placement) → the OpenAI envelope with an HTTP status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from corral.frontend.errors import APIError
from corral.loading.errors import LoadError, ModelStillLoading
from corral.loading.job_placement import plan
from corral.models.config import ModelConfig
from corral.placement.errors import PlacementError
from corral.placement.rejection import NoNodeFits
from corral.routing.errors import BackendRefused, BackendTimeout, ReplicasUnavailable
from corral.routing.queue import Queued
from corral.routing.router import Router


async def _placement_reasons(router: Router, cfg: ModelConfig) -> list[dict[str, str]]:
    """The structured per-node reasons behind a placement failure (error path only: one snapshot read)."""
    try:
        await plan(router.ctx, cfg)
    except NoNodeFits as exc:
        return [
            {"node": name, "filter": r.filter, "reason": r.reason, "detail": r.detail}
            for name, r in sorted(exc.rejections.items())
        ]
    except Exception:  # the message alone still explains the failure
        return []
    return []


@asynccontextmanager
async def http_errors(
    router: Router, cfg: ModelConfig, prompt_param: str | None = None
) -> AsyncIterator[None]:
    """Map what a routed call raises to the APIError the client gets; `prompt_param` is the request field
    that holds the prompt (`messages`, `prompt`, `input`), named when it is too long for the context."""
    try:
        yield
    except Queued as exc:  # OpenAI's 429 code: clients back off and retry on it
        raise APIError(
            429,
            str(exc),
            "rate_limit_error",
            "rate_limit_exceeded",
            headers={"Retry-After": str(exc.retry_after_s)},
            extra={"queue": exc.code},
        ) from None
    except PlacementError as exc:
        reasons = await _placement_reasons(router, cfg)
        raise APIError(
            503,
            str(exc),
            "server_error",
            "no_nodes_available",
            extra={"rejections": reasons} if reasons else None,
        ) from None
    except LoadError as exc:
        raise APIError(502, str(exc), "server_error", "model_load_failed") from None
    except ModelStillLoading as exc:
        raise APIError(
            503,
            str(exc),
            "model_loading",
            "model_loading",
            headers={"Retry-After": str(exc.retry_after_s)},
            extra={"loading": exc.loading},
        ) from None
    except ReplicasUnavailable as exc:  # every replica's circuit breaker is open (routing/breaker.py)
        raise APIError(
            503,
            str(exc),
            "server_error",
            "replicas_unavailable",
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    except BackendTimeout as exc:
        raise APIError(504, str(exc), "server_error", "backend_timeout") from None
    except BackendRefused as exc:
        if exc.context_length_exceeded:  # OpenAI's code: clients branch on it (e.g. to trim the history)
            raise APIError(
                400, str(exc), "invalid_request_error", "context_length_exceeded", prompt_param
            ) from None
        if exc.invalid_request:
            raise APIError(400, str(exc), "invalid_request_error", "invalid_value") from None
        if exc.not_capable:  # the model's config or backend, not a failure: the message says what to change
            raise APIError(400, str(exc), "invalid_request_error", "model_not_capable", "model") from None
        raise APIError(502, str(exc), "server_error", "backend_error") from None

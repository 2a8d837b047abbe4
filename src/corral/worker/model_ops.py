"""NATS `nodes.<id>.model.unload` and `nodes.<id>.model.delete` (reference §3.2), without its quirks (§9).

* `model.unload` frees and stops the processes of the *named* model only — every replica, or just
  the one on `address`'s port when an address is given — and waits until they have exited. The
  reference frees an arbitrary process when no address is sent and never stops it. The reply
  lists the stopped process keys, so the controller deletes exactly those replica rows.
* `model.delete` stops the model's processes, then removes `<models>/<model_name>/` (or the file
  `<models>/<model_name>` and its `<model_name>.*` siblings). The name must be a plain model
  name, and the resolved target must stay inside the models directory (a symlink out of it is
  refused, not followed). File removal runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.msg import Msg

from corral.bus import subjects
from corral.bus.messages import ModelDeleteRequest, ModelOpReply, ModelUnloadRequest, ValidationError
from corral.models.names import name_problem
from corral.worker.supervisor import Supervisor

log = logging.getLogger(__name__)

Handler = Callable[[Msg], Awaitable[None]]


class PathEscape(ValueError):
    """A model's files would resolve outside the models directory."""


def model_keys(supervisor: Supervisor, model_name: str, address: str | None = None) -> list[str]:
    """The process keys of `model_name` (`<model>#<replica>`), narrowed to `address`'s port when given."""
    port = (address or "").rpartition(":")[2]
    return [
        key
        for key, proc in supervisor.processes.items()
        if key.rpartition("#")[0] == model_name and (not port or str(proc.port) == port)
    ]


def model_paths(models_dir: Path, model_name: str) -> list[Path]:
    """What `model.delete` removes; raises PathEscape for anything resolving outside `models_dir`."""
    root = models_dir.resolve()
    candidates = [models_dir / model_name, *sorted(models_dir.glob(f"{model_name}.*"))]
    found = []
    for path in candidates:
        if not path.exists() and not path.is_symlink():
            continue
        if path.is_symlink():
            found.append(path)  # the link itself is removed; what it points to is never touched
            continue
        if not path.resolve().is_relative_to(root) or path.resolve() == root:
            raise PathEscape(f"{path} resolves outside the models directory {root}")
        found.append(path)
    return found


def remove_paths(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


class ModelOps:
    def __init__(self, supervisor: Supervisor, models_dir: Path) -> None:
        self.supervisor, self.models_dir = supervisor, models_dir

    def routes(self, node_id: str) -> dict[str, Handler]:
        return {subjects.model_unload(node_id): self.unload, subjects.model_delete(node_id): self.delete}

    async def _stop_model(self, model_name: str, address: str | None) -> list[str]:
        keys = model_keys(self.supervisor, model_name, address)
        results = await asyncio.gather(*(self.supervisor.stop_key(key) for key in keys))
        return [key for key, (matched, _freed) in zip(keys, results, strict=True) if matched]

    async def unload(self, msg: Msg) -> None:
        try:
            req = ModelUnloadRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(ModelOpReply(error=f"invalid request: {exc}").to_json())
            return
        if (problem := name_problem(req.model_name)) is not None:
            await msg.respond(ModelOpReply(error=f"field 'model_name' {problem}").to_json())
            return
        stopped = await self._stop_model(req.model_name, req.address)
        log.info("model.unload %s: stopped %s", req.model_name, ", ".join(stopped) or "nothing (not running)")
        await msg.respond(ModelOpReply(success=True, stopped_process_keys=stopped).to_json())

    async def delete(self, msg: Msg) -> None:
        try:
            req = ModelDeleteRequest.from_json(msg.data)
        except ValidationError as exc:
            await msg.respond(ModelOpReply(error=f"invalid request: {exc}").to_json())
            return
        if (problem := name_problem(req.model_name)) is not None:
            await msg.respond(ModelOpReply(error=f"field 'model_name' {problem}").to_json())
            return
        stopped = await self._stop_model(req.model_name, None)
        try:
            paths = await asyncio.to_thread(model_paths, self.models_dir, req.model_name)
            await asyncio.to_thread(remove_paths, paths)
        except (PathEscape, OSError) as exc:
            log.warning("model.delete %s refused: %s", req.model_name, exc)
            await msg.respond(ModelOpReply(error=str(exc), stopped_process_keys=stopped).to_json())
            return
        log.info(
            "model.delete %s: removed %s", req.model_name, ", ".join(p.name for p in paths) or "no files"
        )
        await msg.respond(ModelOpReply(success=True, stopped_process_keys=stopped).to_json())

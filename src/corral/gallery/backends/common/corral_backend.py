"""What every Python gallery backend shares: the backend contract around an engine (the reference's
`backend/python/common/`).

A gallery backend runs from its own virtual environment and cannot import corral, so the installer
copies this directory (this module and the gRPC stubs `make proto` generates from corral's
backend.proto) into the installed backend as `common/`; `run.sh` puts it on `PYTHONPATH` (in the
source tree it finds `../common`). A backend supplies an `Engine` and a `BaseServicer` subclass with
its RPCs and calls `main()`. This module gives it:

* bearer auth when `LOCALAI_GRPC_AUTH_TOKEN` is set (constant-time compare, `UNAUTHENTICATED` otherwise);
* the model-identity guard (`NOT_FOUND` "model identity mismatch"; `FAILED_PRECONDITION` before a load);
* LoadModel paths confined to the worker's models directory (`CORRAL_BACKEND_MODELS_ROOT`, else
  `LOCALAI_MODELS_PATH`) and a request's files to its staging directory (`<models>/../staging`),
  symlinks resolved, as corral's own servicer does;
* exit when the parent (the worker) goes away (`LOCALAI_BACKEND_PARENT_WATCH[_INTERVAL]`);
* graceful stop on SIGTERM/SIGINT, the server's message-size and keepalive options;
* blocking engine calls on a pool of `PYTHON_GRPC_MAX_WORKERS` (1) threads, off the event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import backend_pb2
import backend_pb2_grpc
import grpc
import grpc.aio

log = logging.getLogger("backend")

AUTH_TOKEN_ENV = "LOCALAI_GRPC_AUTH_TOKEN"
MODELS_ROOT_ENVS = ("CORRAL_BACKEND_MODELS_ROOT", "LOCALAI_MODELS_PATH")
STAGING_DIR = "staging"  # a request's files: `<models root>/../staging` (ephemeral/ inputs, temp outputs)
WATCH_ENV, WATCH_INTERVAL_ENV = "LOCALAI_BACKEND_PARENT_WATCH", "LOCALAI_BACKEND_PARENT_WATCH_INTERVAL"
WATCH_DEFAULT_S = 2.0
MAX_WORKERS_ENV = "PYTHON_GRPC_MAX_WORKERS"
MAX_MESSAGE_BYTES = 50 * 1024 * 1024
SHUTDOWN_GRACE_S = 5.0
IDENTITY_MISMATCH = "model identity mismatch"
SERVER_OPTIONS = (
    ("grpc.max_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),  # frontends keep calls alive with pings
    ("grpc.http2.max_ping_strikes", 0),
)


class RequestError(Exception):
    """A call the backend refuses; carries the gRPC status to answer with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def invalid(message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, message)


# --- environment ---------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration_s(text: str) -> float:
    """A Go duration (`500ms`, `2s`, `1m30s`) or plain seconds (`0.5`)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (use e.g. 500ms, 2s, 1m)")
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def parent_watch_interval_s() -> float | None:
    """Seconds between parent checks, or None when the watch is disabled."""
    if os.environ.get(WATCH_ENV, "").strip().lower() in ("false", "0", "no", "off"):
        return None
    raw = os.environ.get(WATCH_INTERVAL_ENV, "").strip()
    try:
        interval_s = parse_duration_s(raw) if raw else WATCH_DEFAULT_S
    except ValueError as exc:
        log.warning("%s ignored (%s); using %gs", WATCH_INTERVAL_ENV, exc, WATCH_DEFAULT_S)
        return WATCH_DEFAULT_S
    return interval_s if interval_s > 0 else WATCH_DEFAULT_S


def models_root() -> Path | None:
    for env in MODELS_ROOT_ENVS:
        raw = os.environ.get(env, "").strip()
        if raw:
            return Path(raw)
    return None


# --- confinement ---------------------------------------------------------------------------------


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def model_path(opts: Any) -> tuple[Path, str]:
    """The path LoadModel names and the field that named it: `ModelFile` (relative ones below `ModelPath`),
    else `ModelPath/Model`; refused (PERMISSION_DENIED) when it resolves outside the models root."""
    if opts.ModelFile:
        path = Path(opts.ModelFile)
        if not path.is_absolute() and opts.ModelPath:
            path = Path(opts.ModelPath) / path
        field = "ModelFile"
    elif opts.Model and opts.ModelPath:
        path, field = Path(opts.ModelPath) / opts.Model, "Model"
    else:
        raise invalid("LoadModel needs ModelFile (the staged model) or ModelPath + Model")
    if "\x00" in str(path):
        raise invalid(f"LoadModel {field} contains a NUL byte")
    root = models_root()
    if root is not None:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        if not _inside(real, real_root):
            raise RequestError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"LoadModel {field} {str(path)!r} resolves to {real!r}, outside this worker's models "
                f"directory {real_root!r}; backends only open files under it",
            )
    return path, field


def request_file(request: Any, field: str) -> Path:
    """A request's file (`dst`, `src`): required, and refused (PERMISSION_DENIED) outside the worker's staging
    directory when the models root is known, with the message corral's own servicer gives."""
    value = getattr(request, field)
    label = f"{type(request).__name__}.{field}"
    if not value:
        raise invalid(f"{label} is empty: name the worker-local file")
    if "\x00" in value:
        raise invalid(f"{label} contains a NUL byte")
    root = models_root()
    if root is not None:
        staging = os.path.realpath(Path(os.path.abspath(root)).parent / STAGING_DIR)
        if not os.path.realpath(value).startswith(staging.rstrip(os.sep) + os.sep):
            raise RequestError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{label} {value!r} is outside this worker's staging directory {staging!r}; a request's files "
                "are staged there by the worker (ephemeral/ inputs, temp outputs)",
            )
    return Path(value)


# --- bearer auth ---------------------------------------------------------------------------------


def _presented_token(metadata: Any) -> bytes:
    for key, value in metadata or ():
        if key.lower() == "authorization" and isinstance(value, str) and value[:7].lower() == "bearer ":
            return value[7:].strip().encode()
    return b""


class BearerAuth(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    """Answers `UNAUTHENTICATED` unless metadata `authorization` is `Bearer <LOCALAI_GRPC_AUTH_TOKEN>`."""

    def __init__(self, token: str) -> None:
        self._expected = token.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        presented = _presented_token(details.invocation_metadata)
        handler = await continuation(details)
        if handler is None or hmac.compare_digest(presented, self._expected):
            return handler
        why = (
            "invalid bearer token"
            if presented
            else "missing bearer token: send 'authorization: Bearer <token>'"
        )

        async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            yield  # never reached: makes this the async generator a server-streaming handler is

        # gallery backends serve unary-unary RPCs and server-streaming ones (TTSStream, PredictStream)
        make, behaviour = (
            (grpc.unary_stream_rpc_method_handler, deny_stream)
            if handler.response_streaming
            else (grpc.unary_unary_rpc_method_handler, deny)
        )
        return make(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


# --- the servicer around an engine ---------------------------------------------------------------


class Engine(Protocol):
    """One loaded model; every method blocks and runs on the executor."""

    identity: str  # the ModelOptions.Model it was loaded as; "" when nothing is loaded

    def load(self, opts: Any) -> str:
        """Load the model LoadModel names (use `model_path(opts)`); a message for the log. Raise to refuse."""
        ...

    def free(self) -> None: ...

    def is_loaded(self) -> bool: ...


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class BaseServicer(backend_pb2_grpc.BackendServicer):  # type: ignore[misc]  # generated beside this file
    """Health, LoadModel, Status and Free for any engine; subclasses add the RPCs their engine serves,
    each through `call()` (guard, executor, errors mapped to their status)."""

    def __init__(self, engine: Engine, executor: ThreadPoolExecutor) -> None:
        self.engine, self.executor = engine, executor
        self.loading = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def guard(self, identity: str) -> None:
        """Refuse a call before a load, or one meant for another model (checked when the call runs)."""
        if not self.engine.is_loaded():
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION, "model not loaded: call LoadModel first")
        if identity and self.engine.identity and identity != self.engine.identity:
            raise RequestError(
                grpc.StatusCode.NOT_FOUND,
                f"{IDENTITY_MISMATCH}: this backend serves {self.engine.identity!r}, not {identity!r}",
            )

    async def call(
        self, context: grpc.aio.ServicerContext, rpc: str, identity: str, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """`fn(*args)` on the executor after the identity guard; a RequestError aborts with its status, any
        other exception with INTERNAL naming its type (the log keeps the traceback)."""
        try:
            self.guard(identity)
            return await self.run(fn, *args)
        except RequestError as exc:
            await context.abort(exc.code, str(exc))
        except Exception as exc:
            log.error("%s failed", rpc, exc_info=exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"{rpc} failed: {type(exc).__name__}: {exc}")

    async def Health(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return backend_pb2.Reply(message=b"OK")

    async def LoadModel(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.loading = True
        try:
            message = await self.run(self.engine.load, request)
        except RequestError as exc:
            return backend_pb2.Result(success=False, message=str(exc))
        except Exception as exc:
            log.exception("LoadModel failed")
            return backend_pb2.Result(success=False, message=f"LoadModel failed: {type(exc).__name__}: {exc}")
        finally:
            self.loading = False
        log.info("%s", message)
        return backend_pb2.Result(success=True, message=message)

    async def Status(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        states = backend_pb2.StatusResponse.State
        state = (
            states.BUSY if self.loading else states.READY if self.engine.is_loaded() else states.UNINITIALIZED
        )
        return backend_pb2.StatusResponse(state=state, memory=backend_pb2.MemoryUsageData(total=rss_bytes()))

    async def Free(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.run(self.engine.free)
        return backend_pb2.Result(success=True, message="model freed")


# --- process -------------------------------------------------------------------------------------


async def _watch_parent(original: int, interval_s: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.sleep(interval_s)
        if os.getppid() != original:
            log.warning("parent process %d went away; shutting down", original)
            stop.set()


ServicerFactory = Callable[[ThreadPoolExecutor], BaseServicer]


async def serve(name: str, address: str, make_servicer: ServicerFactory) -> int:
    parent = os.getppid()  # before serving: a parent that dies while we start is still noticed
    executor = ThreadPoolExecutor(max_workers=max(1, int(os.environ.get(MAX_WORKERS_ENV, "1") or 1)))
    token = os.environ.get(AUTH_TOKEN_ENV, "")
    server = grpc.aio.server(interceptors=[BearerAuth(token)] if token else [], options=SERVER_OPTIONS)
    backend_pb2_grpc.add_BackendServicer_to_server(make_servicer(executor), server)
    try:
        if server.add_insecure_port(address) == 0:
            raise RuntimeError("bind returned port 0")
    except RuntimeError as exc:
        print(f"{name}: cannot listen on {address}: {exc} (is the port already in use?)", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await server.start()
    log.info(
        "%s backend listening on %s (%s, pid %d)",
        name,
        address,
        "bearer auth on" if token else "no auth",
        os.getpid(),
    )
    interval_s = parent_watch_interval_s()
    watcher = asyncio.create_task(_watch_parent(parent, interval_s, stop)) if interval_s else None
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await server.stop(SHUTDOWN_GRACE_S)
        executor.shutdown(wait=False, cancel_futures=True)
    log.info("stopped")
    return 0


def main(name: str, description: str, make_servicer: ServicerFactory, argv: list[str] | None = None) -> int:
    """Parse `--addr`, serve until SIGTERM/SIGINT or the parent goes away, then exit at once."""
    parser = argparse.ArgumentParser(description=f"{description} (backend.Backend gRPC)")
    parser.add_argument("--addr", default="localhost:50051", help="HOST:PORT to listen on")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        datefmt="%H:%M:%S",
        format=f"%(asctime)s backend[{name}] %(levelname)s %(message)s",
    )
    try:
        code = asyncio.run(serve(name, args.addr, make_servicer))
    except KeyboardInterrupt:
        code = 130
    # Nothing is left to clean up; interpreter teardown (an engine's thread pools, the model) can take seconds.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

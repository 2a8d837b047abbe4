"""The `backend.Backend` gRPC servicer: lifecycle state, ModelIdentity rule, engine calls.

* Health answers `Reply(message=b"OK")` whenever the process is serving, whatever the model
  state, and never waits on the engine.
* Status reports, beside the state, the engine calls in flight (running or waiting for the engine) and
  the replies the engine produced so far: a worker tells a busy backend (the count moves) from a wedged
  one by them (worker/liveness.py).
* Engine calls run in a worker thread; up to the engine's `parallel` of them at once (its attribute after a
  load; 1 when it has none: the calls are serialised), admitted first come, first served (admission.py);
  LoadModel and Free wait for every call to end and run alone. Status says BUSY only when every place is
  taken. If a caller cancels, its place is held until the engine call really returns; the
  generation stops at its next token and the cancellation is logged and counted.
* PredictStream runs a generation in one thread and sends the text pieces that piled up while
  the reader was slower as one Reply (`reply_pump`); TTSStream runs an engine's `tts_stream` the same way (each
  chunk of speech its own Reply), and is UNIMPLEMENTED for an engine without one.
* LoadModel refuses (PERMISSION_DENIED, naming the field and path) a file path outside the worker's
  models directory when the worker passed one (``CORRAL_BACKEND_MODELS_ROOT``, see ``model_root``).
* Guarded RPCs (Predict, PredictStream, Embedding, TokenizeString and the modality RPCs, Rerank among them)
  answer FAILED_PRECONDITION "... model not loaded" before a successful LoadModel (and after Free), and NOT_FOUND
  "model identity mismatch ..." when `ModelIdentity` is set and differs from the loaded
  `ModelOptions.Model`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio

from corral.backends.admission import Admission
from corral.backends.engine import Engine, EngineError, NotSupportedError
from corral.backends.model_root import models_root_from_env, outside_root, request_files_problem
from corral.backends.reply_pump import ReplyPump, coalesce
from corral.proto import backend_pb2 as pb
from corral.proto import backend_pb2_grpc
from corral.proto.replies import merged_logprobs

log = logging.getLogger(__name__)

IDENTITY_MISMATCH_SENTINEL = "model identity mismatch"
T = TypeVar("T")


class BackendState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    LOADING = "loading"
    READY = "ready"
    ERROR = "error"


def rss_bytes() -> int:
    """Resident set size of this process (0 if unknown)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class EngineProgress:
    """What the engine is doing, for Status: calls admitted and not yet ended, replies produced so far.

    `replies` is written by the engine threads of the calls that run (a lost increment between two of them only
    makes the count move a little less), read by the loop.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.replies = 0

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def counted(self, replies: Iterator[pb.Reply]) -> Iterator[pb.Reply]:
        """`replies`, counting each one as it is produced; closing this closes `replies` (the generation stops)."""
        try:
            for reply in replies:
                self.replies += 1
                yield reply
        finally:
            close = getattr(replies, "close", None)
            if close is not None:
                close()


class CancelFlag:
    """Set on the loop when the caller goes away, read by the engine's thread between tokens (a threading.Event
    without its lock and condition: nothing waits on it; ~2 µs a call less)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def collect_reply(
    engine: Engine, request: pb.PredictOptions, cancelled: CancelFlag, progress: EngineProgress
) -> pb.Reply:
    """Run `engine.predict_stream` to the end and fold it into one Reply (text + final counts)."""
    stream = progress.counted(engine.predict_stream(request))
    replies: list[pb.Reply] = []
    try:
        for reply in stream:
            if cancelled.is_set():
                return pb.Reply()
            replies.append(reply)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    if not replies:
        return pb.Reply()
    final, pieces = replies[-1], replies[:-1]
    final.message = b"".join([reply.message for reply in pieces])
    calls: list[pb.ToolCallDelta] = []
    for reply in pieces:  # tool calls streamed in pieces travel in the unary answer too
        for delta in reply.chat_deltas:  # a piece's content delta, mostly: no call in it
            if delta.tool_calls:
                calls.extend(delta.tool_calls)
    if calls:
        final.chat_deltas.append(pb.ChatDelta(tool_calls=calls))
    if request.Logprobs > 0:  # so do the logprobs of every piece
        final.logprobs = merged_logprobs([reply.logprobs for reply in replies])
    return final


class BackendServicer(backend_pb2_grpc.BackendServicer):
    def __init__(self, engine: Engine, models_root: Path | None = None) -> None:
        self._engine = engine
        self.models_root = models_root if models_root is not None else models_root_from_env()
        self._state = BackendState.UNINITIALIZED
        self._identity = ""
        self._last_error = ""
        self._admission = Admission(1)
        self._threads_in_flight = 0
        self.cancellations = 0  # calls whose caller went away before the answer (logged; tests read it)
        self.fast_lane_port = 0  # advertised on Status when the fast lane listens (corral.lane.server)
        self.progress = EngineProgress()
        self._executor_threads = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor

    @property
    def state(self) -> BackendState:
        return self._state

    @property
    def threads_in_flight(self) -> int:
        """Engine calls still running in a thread (they cannot be interrupted)."""
        return self._threads_in_flight

    async def _run_blocking(
        self,
        fn: Callable[..., T],
        *args: Any,
        on_cancel: Callable[[], None] | None = None,
        inline_ok: bool = True,
    ) -> T:
        """Run `fn` in a thread; if the caller is cancelled, call `on_cancel` (a hint to stop
        early) and still wait for the thread before returning, so the caller's place covers it.
        An engine whose calls cannot block (`blocks` is False) runs inline, no thread hop, unless `inline_ok` is
        False (a call that reads or writes files)."""
        if self._inline(inline_ok):
            return fn(*args)
        future = self._thread(fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if on_cancel is not None:
                on_cancel()
            while not future.done():
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    continue
                except Exception:
                    break
            raise

    def _inline(self, inline_ok: bool) -> bool:
        """Whether a call runs on the loop: an engine whose calls cannot block, unless the call may not."""
        return inline_ok and not getattr(self._engine, "blocks", True)

    def _thread(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`fn(*args)` started in a thread now (asyncio.to_thread without its coroutine, which would start it on
        the loop's next turn)."""
        self._threads_in_flight += 1
        future = asyncio.get_running_loop().run_in_executor(
            None, functools.partial(contextvars.copy_context().run, fn, *args)
        )
        future.add_done_callback(lambda _: self._finished_thread())
        return future

    def _finished_thread(self) -> None:
        self._threads_in_flight -= 1

    def _cancelled(self, rpc: str, replies: int | None = None) -> None:
        self.cancellations += 1
        sent = "" if replies is None else f" after {replies} replies"
        log.info(
            "%s cancelled by the caller%s; generation stopped (%d cancellation(s) so far)",
            rpc,
            sent,
            self.cancellations,
        )

    # ---- admission -------------------------------------------------------------------------

    def _refusal(self, request: Any) -> tuple[grpc.StatusCode, str] | None:
        if self._state is not BackendState.READY:
            why = {
                BackendState.ERROR: f" (last LoadModel failed: {self._last_error})",
                BackendState.LOADING: " yet (LoadModel in progress)",
            }.get(self._state, "; call LoadModel first")
            return grpc.StatusCode.FAILED_PRECONDITION, f"{self._engine.name} backend: model not loaded{why}"
        requested = getattr(request, "ModelIdentity", "")
        if requested and self._identity and requested != self._identity:
            return (
                grpc.StatusCode.NOT_FOUND,
                f"{IDENTITY_MISMATCH_SENTINEL}: request is for {requested!r}, "
                f"this backend has {self._identity!r} loaded",
            )
        return None

    async def _admit(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        refusal = self._refusal(request)
        if refusal is not None:
            await context.abort(*refusal)

    async def _call_engine(
        self,
        context: grpc.aio.ServicerContext,
        fn: Callable[..., T],
        request: Any,
        on_cancel: Callable[[], None] | None = None,
        inline_ok: bool = True,
    ) -> T:
        """Admit, then run one engine call under the lock; engine errors become gRPC statuses."""
        await self._admit(request, context)
        progress, admission = self.progress, self._admission
        progress.in_flight += 1  # `progress.call()` and `admission.slot()`, spelled out (once a call)
        try:
            await admission.enter()
            try:
                await self._admit(request, context)  # state may have changed while we waited
                try:
                    answer = await self._run_blocking(fn, request, on_cancel=on_cancel, inline_ok=inline_ok)
                    progress.replies += 1
                    return answer
                except EngineError as exc:
                    status, detail = exc.status, str(exc)
                except Exception as exc:
                    log.exception("%s failed", getattr(fn, "__name__", "engine call"))
                    status, detail = grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
            finally:
                admission.leave()
        finally:
            progress.in_flight -= 1
        await context.abort(status, detail)
        raise RuntimeError("unreachable: context.abort raises")  # pragma: no cover

    # ---- RPCs ------------------------------------------------------------------------------

    async def Health(self, request: pb.HealthMessage, context: grpc.aio.ServicerContext) -> pb.Reply:
        return pb.Reply(message=b"OK")

    async def Status(self, request: pb.HealthMessage, context: grpc.aio.ServicerContext) -> pb.StatusResponse:
        state = {
            BackendState.UNINITIALIZED: pb.StatusResponse.UNINITIALIZED,
            BackendState.LOADING: pb.StatusResponse.BUSY,
            BackendState.READY: pb.StatusResponse.BUSY if self._admission.full() else pb.StatusResponse.READY,
            BackendState.ERROR: pb.StatusResponse.ERROR,
        }[self._state]
        return pb.StatusResponse(
            state=state,
            memory=pb.MemoryUsageData(total=rss_bytes()),
            corral_fast_lane_port=self.fast_lane_port,
            corral_in_flight=self.progress.in_flight,
            corral_replies_produced=self.progress.replies,
        )

    async def LoadModel(self, request: pb.ModelOptions, context: grpc.aio.ServicerContext) -> pb.Result:
        if self.models_root is not None:
            problem = outside_root(request, self.models_root)
            if problem is not None:
                log.warning("LoadModel %r refused: %s", request.Model, problem)
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)
        async with self._admission.exclusive():
            if self._state is BackendState.READY:
                log.info("replacing loaded model %r with %r", self._identity, request.Model)
                await self._run_blocking(self._free_quietly)
            self._state, self._identity = BackendState.LOADING, ""
            started = time.perf_counter()
            errors: list[str] = []

            def load() -> None:
                try:
                    self._engine.load(request)
                except Exception as exc:
                    errors.append(str(exc) or type(exc).__name__)

            try:
                await self._run_blocking(load)
            finally:  # also when the caller gave up: the thread has finished either way
                if errors:
                    self._state, self._last_error = BackendState.ERROR, errors[0]
                else:
                    self._state, self._identity, self._last_error = BackendState.READY, request.Model, ""
                self._admit_engine_parallel()
            elapsed_s = time.perf_counter() - started
            if errors:
                log.error("LoadModel %r failed after %.2fs: %s", request.Model, elapsed_s, errors[0])
                return pb.Result(success=False, message=errors[0])
            log.info("loaded model %r in %.2fs", request.Model, elapsed_s)
            return pb.Result(success=True, message=f"loaded {request.Model!r} in {elapsed_s:.2f}s")

    async def Free(self, request: pb.HealthMessage, context: grpc.aio.ServicerContext) -> pb.Result:
        async with self._admission.exclusive():
            if self._state is BackendState.UNINITIALIZED:
                return pb.Result(success=True, message="no model loaded")
            identity = self._identity
            try:
                await self._run_blocking(self._free_quietly)
            finally:
                self._state, self._identity, self._last_error = BackendState.UNINITIALIZED, "", ""
                self._admit_engine_parallel()
            log.info("freed model %r", identity)
            return pb.Result(success=True, message=f"freed {identity!r}" if identity else "freed")

    @property
    def parallel(self) -> int:
        """Engine calls admitted at once: the loaded engine's `parallel` (1 when it has none)."""
        return self._admission.capacity

    def _admit_engine_parallel(self) -> None:
        """After a load or a free: admit as many calls at once as the engine now serves. Each running call may hold
        a thread of the loop's default executor for its whole length (a stream's pump), so the executor gets a
        thread per call and a few for short ones."""
        parallel = max(1, int(getattr(self._engine, "parallel", 1) or 1))
        if parallel != self._admission.capacity:
            log.info("admitting %d engine call(s) at once", parallel)
        self._admission.capacity = parallel
        wanted = 2 * parallel + 4
        if parallel > 1 and wanted > self._executor_threads:
            asyncio.get_running_loop().set_default_executor(
                ThreadPoolExecutor(max_workers=wanted, thread_name_prefix="engine")
            )
            self._executor_threads = wanted

    def _free_quietly(self) -> None:
        try:
            self._engine.free()
        except Exception:
            log.exception("engine.free failed")

    async def Predict(self, request: pb.PredictOptions, context: grpc.aio.ServicerContext) -> pb.Reply:
        # Built on predict_stream (same result as engine.predict) so that a caller that goes away
        # stops the generation at the next token instead of holding the model until it ends.
        cancelled = CancelFlag()
        try:
            return await self._call_engine(
                context,
                lambda req: collect_reply(self._engine, req, cancelled, self.progress),
                request,
                on_cancel=cancelled.set,
            )
        except asyncio.CancelledError:
            self._cancelled("Predict")
            raise

    async def Embedding(
        self, request: pb.PredictOptions, context: grpc.aio.ServicerContext
    ) -> pb.EmbeddingResult:
        return await self._call_engine(context, self._engine.embed, request)

    # ---- modalities (issue 23): engines that implement them have `transcribe`, `tts`, `generate_image`, `rerank`

    def _modality(self, method: str, rpc: str) -> Callable[[Any], Any]:
        fn = getattr(self._engine, method, None)
        if fn is not None:
            return fn  # type: ignore[no-any-return]

        def refuse(_request: Any) -> Any:
            raise NotSupportedError(
                f"the {self._engine.name} backend does not implement {rpc}; serve this model "
                "with a backend that does"
            )

        return refuse

    async def _modality_call(
        self, context: grpc.aio.ServicerContext, method: str, rpc: str, request: Any
    ) -> Any:
        problem = request_files_problem(request, self.models_root) if self.models_root is not None else None
        if problem is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, problem)
        return await self._call_engine(context, self._modality(method, rpc), request, inline_ok=False)

    async def AudioTranscription(
        self, request: pb.TranscriptRequest, context: grpc.aio.ServicerContext
    ) -> pb.TranscriptResult:
        return await self._modality_call(context, "transcribe", "AudioTranscription", request)  # type: ignore[no-any-return]

    async def TTS(self, request: pb.TTSRequest, context: grpc.aio.ServicerContext) -> pb.Result:
        return await self._modality_call(context, "tts", "TTS", request)  # type: ignore[no-any-return]

    async def GenerateImage(
        self, request: pb.GenerateImageRequest, context: grpc.aio.ServicerContext
    ) -> pb.Result:
        return await self._modality_call(context, "generate_image", "GenerateImage", request)  # type: ignore[no-any-return]

    async def Rerank(self, request: pb.RerankRequest, context: grpc.aio.ServicerContext) -> pb.RerankResult:
        return await self._modality_call(context, "rerank", "Rerank", request)  # type: ignore[no-any-return]

    async def TokenizeString(
        self, request: pb.PredictOptions, context: grpc.aio.ServicerContext
    ) -> pb.TokenizationResponse:
        return await self._call_engine(context, self._engine.tokenize, request)

    async def PredictStream(
        self, request: pb.PredictOptions, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Reply]:
        # an async generator function itself: grpc.aio iterates a plain function's answer as a sync generator
        async with contextlib.aclosing(
            self._pumped(context, request, self._engine.predict_stream, "PredictStream", _text_batches)
        ) as replies:
            async for reply in replies:
                yield reply

    async def TTSStream(
        self, request: pb.TTSRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Reply]:
        """Speech as the engine makes it (engines with `tts_stream`); others answer UNIMPLEMENTED naming the backend,
        so a caller falls back to TTS."""
        speak = getattr(self._engine, "tts_stream", None)
        if speak is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"the {self._engine.name} backend does not implement TTSStream; use TTS",
            )
            raise RuntimeError("unreachable: context.abort raises")  # pragma: no cover
        async with contextlib.aclosing(
            self._pumped(context, request, speak, "TTSStream", lambda batch, _sent: batch, inline_ok=False)
        ) as replies:
            async for reply in replies:
                yield reply

    async def _pumped(
        self,
        context: grpc.aio.ServicerContext,
        request: Any,
        start: Callable[[Any], Iterator[pb.Reply]],
        rpc: str,
        shape: Callable[[list[pb.Reply], int], list[pb.Reply]],
        inline_ok: bool = True,
    ) -> AsyncGenerator[pb.Reply, None]:
        """Run `start(request)`'s replies in one thread and send them as `shape(ready batch, replies sent)` orders."""
        await self._admit(request, context)
        with self.progress.call():
            async with self._admission.slot():
                await self._admit(request, context)
                failure: tuple[grpc.StatusCode, str] | None = None
                pump: ReplyPump | None = None
                runner: asyncio.Future[None] | None = None
                replies = 0
                try:
                    pump = ReplyPump(
                        lambda: self.progress.counted(start(request)), asyncio.get_running_loop()
                    )
                    if self._inline(inline_ok):
                        pump.run()  # an engine that never waits: every reply is ready, no thread
                    else:  # one thread, started now: the engine's call, then its replies
                        runner = self._thread(pump.run)
                    while (batch := await pump.take()) is not None:
                        for reply in shape(batch, replies):
                            yield reply
                            replies += 1
                except (asyncio.CancelledError, GeneratorExit):
                    self._cancelled(rpc, replies)
                    raise
                except EngineError as exc:
                    failure = exc.status, str(exc)
                except Exception as exc:
                    log.exception("%s failed", rpc)
                    failure = grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
                finally:
                    if pump is not None:
                        pump.stop()
                    while runner is not None and not runner.done():  # the place covers the engine thread
                        with contextlib.suppress(asyncio.CancelledError):
                            await asyncio.shield(runner)
        if failure is not None:
            await context.abort(*failure)


def _text_batches(batch: list[pb.Reply], sent: int) -> list[pb.Reply]:
    """Text pieces that piled up while the reader was slower go as one; the first always alone (time to first
    token never waits for a batch, and a client sees the stream start)."""
    return coalesce(batch) if sent else [batch[0], *coalesce(batch[1:])]

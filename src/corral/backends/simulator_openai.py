"""The simulator alone behind a minimal OpenAI-compatible HTTP server: the engine-alone reference for
benchmarks (benchmarks/serving.py) and a fake engine a third-party router can be put in front of.

    python -m corral.backends.simulator_openai --port 8000 [--model sim] [--option KEY:VALUE ...]

Serves `/v1/chat/completions` and `/v1/completions` (streamed as server-sent events, or not), `/v1/models`
and `/health`. Each request runs the same `SimulatorEngine` a corral backend runs, loaded with the same
options (`--option output_token_time_s:0.01`, `--option parallel:8`, ...: simulator.py), so the words, token
counts and timing are the ones the simulator gives behind corral: a chat request is the engine's
`Messages` (role and content of each message), a completion its `Prompt`, `max_completion_tokens` (or
`max_tokens`) its `Tokens`, 256 when absent, as corral's frontend sends. Up to the engine's `parallel`
requests run at once, the others wait, as the backend servicer admits them. A stream opens with a role
chunk, sends one chunk per word, closes with the finish reason (`length` when the words reached the budget,
else `stop`), the usage chunk when `stream_options.include_usage` asks for it, and `data: [DONE]`.

Deliberately small: no tools, images, logprobs or authentication; sampling fields are accepted and ignored,
as the simulator ignores them.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from corral.backends.engine import EngineError
from corral.backends.simulator import SimulatorEngine
from corral.proto import backend_pb2 as pb

DEFAULT_MAX_TOKENS = 256  # corral's frontend default (frontend/inference/openai.py), so both paths agree

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_DONE = b"data: [DONE]\n\n"
_END = object()  # the stream's end, handed from the engine's thread


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error_body(message: str, kind: str = "invalid_request_error") -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise RequestError(400, f"max_tokens must be a positive integer, got {value!r}")
    return value


def _content(value: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(part.get("text", "") for part in value if isinstance(part, dict))
    return ""


def chat_request(body: dict[str, Any]) -> pb.PredictOptions:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    opts = pb.PredictOptions(Tokens=_max_tokens(body), UseTokenizerTemplate=True)
    for message in messages:
        if not isinstance(message, dict):
            raise RequestError(400, "each message must be an object")
        opts.Messages.append(
            pb.Message(role=str(message.get("role", "")), content=_content(message.get("content")))
        )
    return opts


def completion_request(body: dict[str, Any]) -> pb.PredictOptions:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(token, int) for token in prompt):
        return pb.PredictOptions(Tokens=_max_tokens(body), EmbeddingTokens=prompt)  # token ids: `#<id>` words
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(400, "prompt must be a non-empty string (one prompt per request)")
    return pb.PredictOptions(Tokens=_max_tokens(body), Prompt=prompt)


class SimulatorServer:
    """The ASGI application: one loaded `SimulatorEngine`, its calls admitted `parallel` at a time."""

    def __init__(self, model: str, options: list[str]) -> None:
        self.model = model
        self.engine = SimulatorEngine()
        self.engine.load(pb.ModelOptions(Model=model, Options=options))
        self.created = int(time.time())
        self._parallel = self.engine.parallel
        self._admit: asyncio.Semaphore | None = None  # made on the serving loop
        self._threads = ThreadPoolExecutor(self._parallel, thread_name_prefix="simulator")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            if path == "/v1/models" and method == "GET":
                await _respond(send, 200, self._models())
            elif path in ("/health", "/healthz") and method == "GET":
                await _respond(send, 200, b'{"status":"ok"}')
            elif path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
                await self._generate(path == "/v1/chat/completions", await _body(receive), send)
            else:
                await _respond(send, 404, _error_body(f"no route {method} {path}", "not_found_error"))
        except RequestError as exc:
            await _respond(send, exc.status, _error_body(str(exc)))

    def _models(self) -> bytes:
        return orjson.dumps(
            {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "created": self.created, "owned_by": "simulator"}
                ],
            }
        )

    async def _generate(self, chat: bool, raw: bytes, send: Send) -> None:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise RequestError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        opts = chat_request(body) if chat else completion_request(body)
        if self._admit is None:
            self._admit = asyncio.Semaphore(self._parallel)
        async with self._admit:
            if body.get("stream"):
                await self._stream(chat, body, opts, send)
            else:
                await self._whole(chat, body, opts, send)

    def _head(self, chat: bool, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
        }

    async def _whole(self, chat: bool, body: dict[str, Any], opts: pb.PredictOptions, send: Send) -> None:
        try:
            if self.engine.blocks:
                reply = await asyncio.get_running_loop().run_in_executor(
                    self._threads, self.engine.predict, opts
                )
            else:
                reply = self.engine.predict(opts)
        except EngineError as exc:
            raise RequestError(400, str(exc)) from None
        text = reply.message.decode(errors="replace")
        finish = "length" if reply.tokens >= opts.Tokens else "stop"
        choice: dict[str, Any] = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            if chat
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        )
        await _respond(
            send, 200, orjson.dumps({**self._head(chat, body), "choices": [choice], "usage": _usage(reply)})
        )

    async def _stream(self, chat: bool, body: dict[str, Any], opts: pb.PredictOptions, send: Send) -> None:
        try:
            pieces = self.engine.predict_stream(opts)  # checks the request before the first piece
        except EngineError as exc:
            raise RequestError(400, str(exc)) from None
        head = self._head(chat, body)
        head["object"] = "chat.completion.chunk" if chat else "text_completion"
        opening = orjson.dumps(head)[:-1]
        if chat:
            prefix, suffix = opening + b',"choices":[{"index":0,"delta":{"content":', b"}"
        else:
            prefix, suffix = opening + b',"choices":[{"index":0,"text":', b""
        suffix += b',"logprobs":null,"finish_reason":null}]}\n\n'
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        if chat:
            role = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            await _event(send, {**head, "choices": [role]})
        final = pb.Reply()
        async for reply in self._replies(pieces):
            if reply.message:
                text = orjson.dumps(reply.message.decode(errors="replace"))
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + prefix + text + suffix,
                        "more_body": True,
                    }
                )
            else:
                final = reply
        finish = "length" if final.tokens >= opts.Tokens else "stop"
        closing: dict[str, Any] = (
            {"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}
            if chat
            else {"index": 0, "text": "", "logprobs": None, "finish_reason": finish}
        )
        await _event(send, {**head, "choices": [closing]})
        stream_options = body.get("stream_options")
        if isinstance(stream_options, dict) and stream_options.get("include_usage"):
            await _event(send, {**head, "choices": [], "usage": _usage(final)})
        await send({"type": "http.response.body", "body": _DONE, "more_body": False})

    async def _replies(self, pieces: Iterator[pb.Reply]) -> Any:
        """The engine's replies, iterated on the loop when it never sleeps, else on a thread (as the servicer)."""
        if not self.engine.blocks:
            for reply in pieces:
                yield reply
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()

        def drain() -> None:
            try:
                for reply in pieces:
                    loop.call_soon_threadsafe(queue.put_nowait, reply)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _END)

        done = loop.run_in_executor(self._threads, drain)
        while (item := await queue.get()) is not _END:
            assert isinstance(item, pb.Reply)
            yield item
        await done


def _usage(reply: pb.Reply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.tokens,
        "total_tokens": reply.prompt_tokens + reply.tokens,
    }


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes) -> None:
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _event(send: Send, payload: dict[str, Any]) -> None:
    await send(
        {"type": "http.response.body", "body": b"data: " + orjson.dumps(payload) + b"\n\n", "more_body": True}
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m corral.backends.simulator_openai",
        description="The simulator behind a minimal OpenAI-compatible HTTP server.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="sim", help="the model's name and the simulator's identity")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="a simulator option (simulator.py), e.g. output_token_time_s:0.01; repeatable",
    )
    args = parser.parse_args(argv)
    import uvicorn

    app = SimulatorServer(args.model, args.option)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="off")


if __name__ == "__main__":
    main()

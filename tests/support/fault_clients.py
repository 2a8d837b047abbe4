"""Bounded clients for fault scenarios: one chat, one stream, back-to-back traffic, a summary of replies.

Every call is bounded by a timeout and never raises: what the client saw is returned as data
(status 0 = no HTTP answer), so a scenario can report it and a test can assert on it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx
import orjson

from support.waiting import wait_for

CLIENT_TIMEOUT_S = 90.0  # bound on any one client call in a fault scenario (a hang fails, never blocks)
STREAM_SILENCE_S = (
    60.0  # a stream silent this long counts as hung (the frontend's own idle bound is far below)
)


@dataclass
class Reply:
    """One client request as the client saw it."""

    started: float
    ended: float
    status: int  # 0: no HTTP answer (timeout, connection error)
    message: str  # the error message (OpenAI envelope), or the client exception

    @property
    def ok(self) -> bool:
        return self.status == 200

    def seen(self) -> str:
        return "200" if self.ok else f"{self.status or 'no answer'} {self.message[:160]}"


def chat_body(model: str, max_tokens: int = 3, stream: bool = False) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def chat(
    url: str,
    model: str,
    timeout_s: float = CLIENT_TIMEOUT_S,
    client: httpx.Client | None = None,
    **extra: object,
) -> Reply:
    """One bounded chat request (on `client`'s kept-alive connections if given); never raises."""
    started = time.monotonic()
    try:
        response = (client or httpx).post(
            f"{url}/v1/chat/completions", json={**chat_body(model), **extra}, timeout=timeout_s
        )
    except httpx.HTTPError as exc:
        return Reply(started, time.monotonic(), 0, f"{type(exc).__name__}: {exc}")
    message = ""
    if response.status_code != 200:
        try:
            message = str(response.json()["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
    return Reply(started, time.monotonic(), response.status_code, message)


@dataclass
class StreamResult:
    status: int = 0
    pieces: int = 0  # content chunks received
    finish_reason: str | None = None
    error: str = ""  # an SSE error event's message, or the client exception
    done: bool = False  # `data: [DONE]` received
    elapsed_s: float = 0.0

    def seen(self) -> str:
        if self.status != 200:
            return f"{self.status or 'no answer'} {self.error[:160]}"
        end = f"finish {self.finish_reason}" if self.finish_reason else f"error event: {self.error[:160]}"
        return f"200, {self.pieces} chunks then {end}{'' if self.done else ' (no [DONE])'}"


def stream_chat(
    url: str, model: str, max_tokens: int, result: StreamResult, timeout_s: float = STREAM_SILENCE_S
) -> StreamResult:
    """A streamed chat request, recorded into `result` as it goes (so another thread can watch it)."""
    started = time.monotonic()
    deadline = started + CLIENT_TIMEOUT_S  # overall; `timeout_s` bounds each silence
    try:
        with httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json=chat_body(model, max_tokens, stream=True),
            timeout=timeout_s,
        ) as response:
            result.status = response.status_code
            if response.status_code != 200:
                response.read()
                result.error = response.text[:300]
                return result
            for line in response.iter_lines():
                _stream_line(line, result)
                if result.done or time.monotonic() > deadline:
                    break
            if time.monotonic() > deadline:
                result.error = result.error or f"stream still open after {CLIENT_TIMEOUT_S:g}s"
    except httpx.HTTPError as exc:
        result.error = result.error or f"{type(exc).__name__}: {exc}"
    finally:
        result.elapsed_s = time.monotonic() - started
    return result


def _stream_line(line: str, result: StreamResult) -> None:
    if not line.startswith("data: "):
        return
    data = line[len("data: ") :]
    if data == "[DONE]":
        result.done = True
        return
    event = orjson.loads(data)
    if "error" in event:
        result.error = str(event["error"].get("message", event["error"]))
        return
    for choice in event.get("choices", []):
        if choice.get("delta", {}).get("content"):
            result.pieces += 1
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]


class Traffic:
    """Clients in threads sending bounded requests back to back until stopped; every reply is kept."""

    def __init__(
        self,
        url: str | Callable[[int], str],
        model: str,
        concurrency: int = 2,
        timeout_s: float = 30.0,
        pause_s: float = 0.05,
    ) -> None:
        self.url = url if callable(url) else (lambda _i: url)
        self.model, self.timeout_s, self.pause_s = model, timeout_s, pause_s
        self.replies: list[Reply] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(concurrency)
        ]

    def _client(self, index: int) -> None:
        n = 0
        # One client per thread, as a real client keeps its connections: a new connection per request
        # would churn through loopback ephemeral ports, where the test workers' backend ports also live.
        with httpx.Client() as client:
            while not self._stop.is_set():
                reply = chat(self.url(index + n), self.model, self.timeout_s, client)
                n += 1
                with self._lock:
                    self.replies.append(reply)
                self._stop.wait(self.pause_s)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 10)

    def snapshot(self) -> list[Reply]:
        with self._lock:
            return list(self.replies)

    def served_since(self, t: float) -> int:
        return sum(1 for r in self.snapshot() if r.ok and r.started >= t)

    def wait_served(self, count: int, what: str, timeout_s: float = 60.0) -> None:
        t = time.monotonic()
        wait_for(lambda: self.served_since(t) >= count, f"{count} requests served {what}", timeout_s)


def summarize(replies: Iterable[Reply]) -> str:
    """`200 x41, 503 x2 (model x ...)`: counts per status, with the first message of each failure kind."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for reply in replies:
        key = str(reply.status or "no answer")
        counts[key] += 1
        if not reply.ok:
            first.setdefault(key, reply.message[:240])
    return ", ".join(f"{k} x{n}" + (f" ({first[k]})" if k in first else "") for k, n in counts.most_common())


def until_served(
    url: str, model: str, since: float, timeout_s: float = 90.0, per_call_s: float = 30.0
) -> tuple[float | None, list[Reply]]:
    """Send requests until one is served; returns (seconds from `since` to that answer, every reply)."""
    replies: list[Reply] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = chat(url, model, min(per_call_s, max(1.0, deadline - time.monotonic())))
        replies.append(reply)
        if reply.ok:
            return reply.ended - since, replies
        time.sleep(0.2)
    return None, replies


def load_status(url: str, model: str) -> dict[str, object] | None:
    try:
        response = httpx.get(f"{url}/api/models/{model}/load-status", timeout=10)
    except httpx.HTTPError:
        return None
    return dict(response.json()) if response.status_code == 200 else None

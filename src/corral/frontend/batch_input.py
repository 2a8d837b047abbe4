"""A batch's input file, checked line by line (pure; the batch runner feeds it the file a chunk at a time, off
the event loop).

Each non-blank line must be a JSON object `{"custom_id", "method": "POST", "url", "body"}` whose url is the
batch's endpoint, whose custom_id no earlier line used, and whose body is an object naming a `model` (and not
asking to `stream`: a batch's answers are whole). Any line that is not is an error naming its line number (from
1), in OpenAI's `errors` shape; one error fails the whole batch before any line runs, as OpenAI's validation
does. An unknown model is not checked here: that line runs and gets the inference path's own 404 in the error
file (a model may be added while the batch waits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

LINE_KEYS = ("custom_id", "method", "url", "body")
CUSTOM_ID_MAX = 512
ERRORS_LISTED = 100  # errors a failed batch lists (the count of the rest is said in the last one)


@dataclass(frozen=True)
class LineError:
    code: str
    message: str
    line: int | None
    param: str | None

    def obj(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "line": self.line, "param": self.param}


@dataclass
class InputCheck:
    """Feed it the file's chunks in order, then `close()`; `lines` are (line, custom_id, url, body JSON) not yet
    taken (`take_lines`: the runner stores them as it goes, so a large file is never held whole). After the first
    error no more lines are kept: the batch fails, only the errors matter."""

    endpoint: str
    max_requests: int
    lines: list[tuple[int, str, str, str]] = field(default_factory=list)
    errors: list[LineError] = field(default_factory=list)
    model: str | None = None
    errors_total: int = 0
    total: int = 0  # good lines seen
    _rest: bytes = b""
    _number: int = 0
    _seen: dict[str, int] = field(default_factory=dict)

    def feed(self, chunk: bytes) -> None:
        parts = (self._rest + chunk).split(b"\n")
        self._rest = parts.pop()
        for raw in parts:
            self._line(raw)

    def close(self) -> None:
        if self._rest:
            self._line(self._rest)
            self._rest = b""
        if not self.total and not self.errors_total:
            self._error("empty_file", "the input file holds no request line; send JSONL, one request a line")
        if self.total > self.max_requests:
            self._error(
                "too_many_requests",
                f"the input file holds {self.total} requests; a batch takes at most {self.max_requests} "
                "(CORRAL_BATCH_MAX_REQUESTS)",
            )
        if self.errors_total > len(self.errors):
            last = self.errors[-1]
            more = self.errors_total - len(self.errors)
            self.errors[-1] = LineError(
                last.code, f"{last.message} ({more} more errors not listed)", last.line, last.param
            )

    @property
    def failed(self) -> bool:
        return self.errors_total > 0

    def errors_obj(self) -> dict[str, Any]:
        """OpenAI's `errors` of a batch."""
        return {"object": "list", "data": [error.obj() for error in self.errors]}

    def _error(self, code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        self.errors_total += 1
        if len(self.errors) < ERRORS_LISTED:
            self.errors.append(LineError(code, message, line, param))

    def _line(self, raw: bytes) -> None:
        self._number += 1
        n = self._number
        if not raw.strip():
            return
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._error("invalid_json_line", f"line {n} is not valid JSON (UTF-8): {exc}", n)
            return
        if not isinstance(data, dict):
            self._error("invalid_json_line", f"line {n} is not a JSON object", n)
            return
        problem = self._problem(n, data)
        if problem is not None:
            self._error(*problem)
            return
        self._seen[data["custom_id"]] = n
        if self.model is None:
            self.model = data["body"]["model"]
        self.total += 1
        if not self.errors_total and self.total <= self.max_requests:
            self.lines.append((n, data["custom_id"], data["url"], orjson.dumps(data["body"]).decode()))

    def take_lines(self) -> list[tuple[int, str, str, str]]:
        """The good lines kept since the last take."""
        taken, self.lines = self.lines, []
        return taken

    def _problem(self, n: int, data: dict[str, Any]) -> tuple[str, str, int, str] | None:
        """(code, message, line, param) of the first thing wrong with a parsed line, None when it is right."""
        for key in data:
            if key not in LINE_KEYS:
                return (
                    "unknown_parameter",
                    f"line {n}: unknown key {str(key)[:40]!r}; a line has {', '.join(LINE_KEYS)}",
                    n,
                    str(key)[:40],
                )
        for key in LINE_KEYS:
            if key not in data:
                return "missing_required_parameter", f"line {n}: {key!r} is required", n, key
        custom_id, body = data["custom_id"], data["body"]
        if (
            not isinstance(custom_id, str)
            or not custom_id
            or len(custom_id) > CUSTOM_ID_MAX
            or "\x00" in custom_id
        ):
            return (
                "invalid_value",
                f"line {n}: 'custom_id' must be a string of 1 to {CUSTOM_ID_MAX} characters, no NUL",
                n,
                "custom_id",
            )
        if custom_id in self._seen:
            return (
                "duplicate_custom_id",
                f"line {n}: custom_id {custom_id[:40]!r} was already used on line {self._seen[custom_id]}; each "
                "request needs its own",
                n,
                "custom_id",
            )
        if data["method"] != "POST":
            return "invalid_value", f"line {n}: 'method' must be \"POST\"", n, "method"
        if data["url"] != self.endpoint:
            return (
                "invalid_url",
                f"line {n}: url {str(data['url'])[:80]!r} is not the batch's endpoint {self.endpoint!r}",
                n,
                "url",
            )
        if not isinstance(body, dict):
            return "invalid_value", f"line {n}: 'body' must be a JSON object (the request's body)", n, "body"
        if not isinstance(body.get("model"), str) or not body["model"] or "\x00" in body["model"]:
            return (
                "missing_required_parameter",
                f"line {n}: 'body.model' is required (a model name)",
                n,
                "body.model",
            )
        if body.get("stream"):
            return (
                "unsupported_value",
                f"line {n}: 'body.stream' is not supported in a batch; leave it out",
                n,
                "body.stream",
            )
        return None

"""Route llama.cpp's C log into Python: errors to our logger (once each), recent lines kept.

llama.cpp explains load failures (bad magic, unknown architecture, truncated tensor data) only
in its log, while llama-cpp-python raises a generic "Failed to load model". `captured_llama_log`
keeps the lines logged during a block so the LoadModel error can carry the real cause.
"""

from __future__ import annotations

import ctypes
import logging
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp

log = logging.getLogger("corral.backends.llama_cpp.native")

# enum ggml_log_level: NONE=0, DEBUG=1, INFO=2, WARN=3, ERROR=4, CONT=5 (continues the previous line)
_LEVEL_WARN, _LEVEL_ERROR, _LEVEL_CONT = 3, 4, 5
_MAX_LINES = 200
_MAX_DISTINCT_ERRORS_LOGGED = 100


class LlamaLogCapture:
    def __init__(self) -> None:
        self.lines: deque[tuple[int, str]] = deque(maxlen=_MAX_LINES)

    def add(self, level: int, text: str) -> None:
        if level == _LEVEL_CONT and self.lines:
            previous_level, previous = self.lines.pop()
            self.lines.append((previous_level, previous + text))
            return
        self.lines.append((level, text))

    def error_summary(self) -> str:
        """The error lines (else warnings), stripped and joined; '' if llama.cpp said nothing useful."""
        for wanted in (_LEVEL_ERROR, _LEVEL_WARN):
            picked = [text.strip() for level, text in self.lines if level == wanted and text.strip()]
            if picked:
                return "; ".join(picked)
        return ""


_current = LlamaLogCapture()
_errors_logged: set[str] = set()


def _log_line(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    try:
        message = text.decode("utf-8", errors="replace")
        _current.add(level, message)
        line = message.strip()
        if level == _LEVEL_ERROR and line and line not in _errors_logged:
            if len(_errors_logged) < _MAX_DISTINCT_ERRORS_LOGGED:
                _errors_logged.add(line)
            log.warning("llama.cpp: %s", line)
    except Exception:
        pass


# the C callback, kept referenced at module level so it is never freed while llama.cpp may call it
_on_llama_log = llama_cpp.llama_log_callback(_log_line)
llama_cpp.llama_log_set(_on_llama_log, ctypes.c_void_p(0))


def route_mtmd_log(mtmd: object) -> None:
    """The multimodal library (llama_vision.py) logs through its own setters: route them here too (its per-image
    progress lines would otherwise go to stderr on every request)."""
    mtmd.mtmd_log_set(_on_llama_log, ctypes.c_void_p(0))  # type: ignore[attr-defined]
    mtmd.mtmd_helper_log_set(_on_llama_log, ctypes.c_void_p(0))  # type: ignore[attr-defined]


@contextmanager
def captured_llama_log() -> Iterator[LlamaLogCapture]:
    """Collect llama.cpp log lines emitted inside the block (calls are serialised by the server)."""
    global _current
    previous, _current = _current, LlamaLogCapture()
    try:
        yield _current
    finally:
        _current = previous

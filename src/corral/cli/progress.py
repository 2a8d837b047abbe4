"""Progress of a load as `GET /api/models/{id}/load-status` reports it: a bar redrawn in place on a
terminal, one line per phase or 10 % step otherwise (logs and pipes stay readable)."""

from __future__ import annotations

from typing import Any, TextIO

from corral.cli.tables import size

BAR_WIDTH = 30
STEP_PCT = 10  # without a terminal, a line per phase change or per this many percent


def bar(percent: float, width: int = BAR_WIDTH) -> str:
    filled = int(max(0.0, min(100.0, percent)) / 100 * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def describe(status: dict[str, Any]) -> str:
    """`staging on node-1, 12.0 MB of 48.0 MB, ETA 3s` from a load-status body."""
    text = str(status.get("state", "?"))
    if status.get("node"):
        text += f" on {status['node']}"
    if int(status.get("total_bytes") or 0) > 0:
        text += f", {size(status.get('bytes_sent'))} of {size(status.get('total_bytes'))}"
        if int(status.get("total_files") or 0) > 1:
            text += f" (file {status.get('file_index')}/{status.get('total_files')})"
    if status.get("eta_seconds") is not None:
        text += f", ETA {max(1, round(float(status['eta_seconds'])))}s"
    return text


def status_line(model: str, status: dict[str, Any]) -> str:
    percent = float(status.get("progress") or 0.0)
    return f"{model} {bar(percent)} {percent:5.1f}% {describe(status)}"


class LoadView:
    def __init__(self, model: str, out: TextIO, tty: bool) -> None:
        self.model, self.out, self.tty = model, out, tty
        self._last: tuple[str, int] | None = None
        self._width = 0

    def update(self, status: dict[str, Any]) -> None:
        line = status_line(self.model, status)
        if self.tty:
            self.out.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.out.flush()
            return
        step = (str(status.get("state")), int(float(status.get("progress") or 0.0) // STEP_PCT))
        if step != self._last:
            self._last = step
            print(line, file=self.out, flush=True)

    def finish(self, text: str) -> None:
        if self.tty and self._width:
            self.out.write("\r" + " " * self._width + "\r")
        print(text, file=self.out, flush=True)

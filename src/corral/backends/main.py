"""`corral backend NAME --addr HOST:PORT` — start one backend process.

NAME is `llama-cpp` (llama-cpp-python, GGUF models) or `simulator` (deterministic fake model).
Usage errors print one line on stderr and exit 2. llama_cpp is imported only for `llama-cpp`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import NoReturn

from corral.backends.engine import Engine
from corral.backends.server import AddressError, parse_addr, serve
from corral.config.backend import BackendSettings
from corral.config.errors import ConfigError
from corral.config.settings import load
from corral.runtime.loops import run_fast
from corral.telemetry import otlp

BACKEND_NAMES = ("llama-cpp", "simulator")
USAGE = f"corral backend {{{','.join(BACKEND_NAMES)}}} --addr HOST:PORT"
EXIT_USAGE = 2
EXIT_STARTUP_FAILED = 1


class _UsageError(Exception):
    pass


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, no usage dump
        raise _UsageError(f"{message} (usage: {USAGE})")


def _simulator() -> Engine:
    from corral.backends.simulator import SimulatorEngine

    return SimulatorEngine()


def _llama_cpp() -> Engine:
    from corral.backends.llama_cpp import LlamaCppEngine

    return LlamaCppEngine()


ENGINE_FACTORIES: dict[str, Callable[[], Engine]] = {"llama-cpp": _llama_cpp, "simulator": _simulator}


def _configure_logging(name: str, level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s backend[{name}] %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = load(
            BackendSettings,
            "corral backend",
            "Serve one model replica over gRPC (backend.Backend).",
            argv,
            parser_class=_ArgumentParser,
        )
        if args.name not in ENGINE_FACTORIES:
            raise _UsageError(f"unknown backend {args.name!r}; accepted: {', '.join(BACKEND_NAMES)}")
        address = parse_addr(args.addr)
    except (_UsageError, AddressError, ConfigError) as exc:
        print(f"corral backend: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _configure_logging(args.name, args.log_level)
    try:
        engine = ENGINE_FACTORIES[args.name]()
    except ImportError as exc:
        print(
            f"corral backend: {args.name} needs a package that is not installed ({exc}); "
            "install it with: pip install 'corral[llama]'",
            file=sys.stderr,
        )
        return EXIT_STARTUP_FAILED
    telemetry = otlp.configure(f"corral-backend-{args.name}")
    try:
        return run_fast(serve(engine, address))
    except OSError as exc:
        print(f"corral backend: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILED
    except KeyboardInterrupt:
        return 130
    finally:
        if telemetry is not None:
            telemetry.shutdown()  # flush the last spans


if __name__ == "__main__":
    raise SystemExit(main())

"""`corral` command line: run (frontend), worker, backend, up (embedded stack), models, and the
operator's commands (nodes, models, activity) that ask a frontend."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence

from corral.config.errors import ConfigError
from corral.runtime.loops import run_fast

USAGE = """usage: corral <command> [options]

commands:
  up        start PostgreSQL, NATS, a frontend and workers on this machine (the embedded default)
  run       start a frontend (OpenAI-compatible API, node registry, router)
  worker    start a worker that registers with a frontend and runs backend processes
            (`corral worker ds4-distributed -- <args>`: exec the ds4 backend's layer-split worker)
  agent-worker  start an agent worker: MCP tool discovery and calls, agent jobs (over NATS)
  p2p-worker vllm <model>  run a headless vLLM data-parallel follower (optionally visible as a node)
  backend   start one gRPC backend process (spawned by workers)
  nats-auth-setup  make NATS operator/account material and a server config for JWT mode

operator commands (ask a frontend: --url / $CORRAL_URL, --api-key / $CORRAL_API_KEY; --json for JSON):
  nodes                        the cluster's nodes: status, models, in-flight, memory, labels
  models                       configured models: size, where they fit, where they are loaded
  models load NAME [--follow]  load a model now; --follow draws its progress until it is ready
  models prepare DIR           put the default models and their configs into DIR (also `corral models DIR`)
  activity [--history]         running operations (installs, upgrades, removals, staging)

`corral <command> --help` lists every flag with its environment variable and default.
`corral --version` prints the installed version.
"""


def version() -> str:
    """The installed distribution's version (the checkout's `__version__` when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("corral")
    except PackageNotFoundError:
        from corral import __version__

        return __version__


def setup_logging(level: str, component: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname).1s {component} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("nats", "httpx", "asyncio", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _preload() -> None:
    """Import now what libraries import on first use, so that first use on the event loop does not stall it
    (httpx imports httpcore and h11 when the first client is made: ~0.1 s of CPU)."""
    import anyio._backends._asyncio  # noqa: F401 - httpcore picks its backend on the first request
    import httpcore  # noqa: F401


def _run_frontend(argv: Sequence[str]) -> int:
    from corral.config.frontend import FrontendSettings
    from corral.config.settings import load
    from corral.frontend.http_workers import child_index, run_http_workers
    from corral.frontend.main import serve
    from corral.runtime.loopwatch import watched

    settings = load(FrontendSettings, "corral run", "Start a frontend.", argv)
    index = child_index()
    setup_logging(settings.log_level, "frontend" if index is None else f"frontend.{index}")
    if settings.http_workers > 1 and index is None:
        return run_http_workers(settings, list(argv))
    _preload()
    return run_fast(watched(serve(settings), "frontend", settings.slow_callback_ms))


def _split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(own arguments, everything after the first `--`)."""
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        return args[:cut], args[cut + 1 :]
    return args, []


def _run_ds4_distributed(argv: Sequence[str]) -> int:
    from corral.config.launchers import Ds4Settings
    from corral.config.settings import load
    from corral.launchers import ds4

    own, passthrough = _split_passthrough(argv)
    settings = load(Ds4Settings, "corral worker ds4-distributed", ds4.USAGE, own)
    setup_logging(settings.log_level, "ds4-worker")
    return ds4.run(passthrough, settings)


def _run_p2p_worker(argv: Sequence[str]) -> int:
    from corral.config.launchers import VllmFollowerSettings
    from corral.config.settings import build_parser, resolve
    from corral.launchers import vllm

    if not argv or argv[0] != "vllm":
        raise ConfigError(
            "usage: corral p2p-worker vllm <model> --data-parallel-size N "
            "--data-parallel-size-local N --start-rank N --master-addr HOST --master-port PORT"
        )
    own, passthrough = _split_passthrough(argv[1:])
    parser = build_parser(
        VllmFollowerSettings, "corral p2p-worker vllm", "Run a headless vLLM data-parallel follower."
    )
    parser.add_argument("model", help="Hugging Face model id or local path (must match the head)")
    parser.add_argument(
        "--vllm-arg",
        dest="vllm_args",
        action="append",
        default=[],
        help="an extra argument for `vllm serve`, verbatim: --vllm-arg=--enforce-eager (repeatable; or put them after --)",
    )
    namespace = vars(parser.parse_args(own))
    settings = resolve(VllmFollowerSettings, namespace, os.environ)
    setup_logging(settings.log_level, "vllm-follower")
    try:
        return asyncio.run(vllm.run(namespace["model"], settings, namespace["vllm_args"] + passthrough))
    except vllm.TopologyError as exc:
        raise ConfigError(str(exc)) from None


def _run_worker(argv: Sequence[str]) -> int:
    if argv and argv[0] == "ds4-distributed":
        return _run_ds4_distributed(argv[1:])
    from corral.config.settings import load
    from corral.config.worker import WorkerSettings
    from corral.up.worker import serve_worker

    settings = load(WorkerSettings, "corral worker", "Start a worker.", argv)
    setup_logging(settings.log_level, "worker")
    _preload()
    return serve_worker(settings)


def _run_agent_worker(argv: Sequence[str]) -> int:
    from corral.agents.worker import AgentWorker
    from corral.config.agents import AgentWorkerSettings
    from corral.config.settings import load
    from corral.runtime.loopwatch import watched

    settings = load(AgentWorkerSettings, "corral agent-worker", "Start an agent worker.", argv)
    setup_logging(settings.log_level, "agent-worker")
    _preload()
    import jsonschema  # noqa: F401 - the MCP SDK imports it on the first tool result, on the loop (~0.2 s)

    return asyncio.run(watched(AgentWorker(settings).run(), "agent-worker", settings.slow_callback_ms))


def _run_backend(argv: Sequence[str]) -> int:
    from corral.backends.main import main as backend_main

    return backend_main(list(argv))


def _run_up(argv: Sequence[str]) -> int:
    from corral.up.stack import main as up_main

    return up_main(list(argv))


def _run_nodes(argv: Sequence[str]) -> int:
    from corral.cli import commands
    from corral.config.client import ClientSettings
    from corral.config.settings import load

    return commands.nodes(load(ClientSettings, "corral nodes", "List the cluster's nodes.", argv))


def _run_activity(argv: Sequence[str]) -> int:
    from corral.cli import commands
    from corral.config.client import ActivitySettings
    from corral.config.settings import load

    return commands.activity(load(ActivitySettings, "corral activity", "List running operations.", argv))


def _run_models(argv: Sequence[str]) -> int:
    from corral.cli import commands
    from corral.config.client import ClientSettings, ModelLoadSettings
    from corral.config.settings import load
    from corral.models.defaults import main as models_main

    args = list(argv)
    if args[:1] == ["prepare"]:
        return models_main(args[1:])
    if args[:1] == ["load"]:
        return commands.load(load(ModelLoadSettings, "corral models load", "Load a model now.", args[1:]))
    if args[:1] == ["list"]:
        args = args[1:]
    elif len(args) == 1 and not args[0].startswith(
        "-"
    ):  # `corral models DIR`, as before the operator commands
        return models_main(args)
    return commands.models(load(ClientSettings, "corral models", "List the configured models.", args))


def _run_nats_auth_setup(argv: Sequence[str]) -> int:
    from corral.cli.nats_auth_setup import main as setup_main

    return setup_main(list(argv))


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "up": _run_up,
    "run": _run_frontend,
    "worker": _run_worker,
    "agent-worker": _run_agent_worker,
    "p2p-worker": _run_p2p_worker,
    "backend": _run_backend,
    "models": _run_models,
    "nodes": _run_nodes,
    "activity": _run_activity,
    "nats-auth-setup": _run_nats_auth_setup,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] in ("--version", "-V", "version"):
        print(f"corral {version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"corral: unknown command {args[0]!r}; use one of: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return command(args[1:])
    except ConfigError as exc:
        print(f"corral {args[0]}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # expected failures are typed; print one line, not a traceback
        from corral.cli.startup_errors import is_expected

        if is_expected(exc):
            print(f"corral {args[0]}: {exc}", file=sys.stderr)
            return 1
        raise

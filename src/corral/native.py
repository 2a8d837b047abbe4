"""The request path's modules, compiled with mypyc (`make native`, part of `make install`): the same source, run as C.

A warm request spends most of its frontend CPU in the interpreter running these modules (the HTTP server's
callbacks, the hot path, routing, the fast lane, the accounting): compiled, their calls among themselves are C
calls and their classes' attributes are struct fields (`benchmarks/routing_overhead.py` measures the frontend's
CPU per request). The source stays the one truth: a checkout without a C compiler, a wheel, or
`CORRAL_NATIVE=0` runs the same modules as Python, with the same behaviour.

The compiled modules sit beside their sources (`x.py` and `x.cpython-311-*.so`: Python imports the `.so` first).
So that an edited source is never shadowed by an older build, `guard()` (run by `corral/__init__.py`, before any
of them is imported) serves every one of them from source when any build is older than its source, and says so
once on stderr; they are compiled as one group (their calls to each other are direct), so it is all or none.

mypyc's rules for these modules: no async generators (`asynccontextmanager` included), no classes created or
subclassed at run time, attributes declared on the class (not only set by a base written in Python), and values
that match their annotations at run time (a stub that says `bytes` where the library returns None fails there:
annotate it `Any`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

NATIVE_ENV = "CORRAL_NATIVE"  # "0": run the compiled modules' sources, as Python
GROUP = "corral_native"  # mypyc's shared library of the group (`corral_native__mypyc.*.so`, beside `corral/`)
ROOT = Path(__file__).resolve().parent

MODULES = (
    # the frontend's warm path, in the order a request meets them
    "corral.runtime.httpguard",
    "corral.frontend.direct_path",
    "corral.frontend.limits",
    "corral.frontend.bounds",
    "corral.frontend.access",
    "corral.frontend.hot_path",
    "corral.routing.router",
    "corral.routing.queue",
    "corral.routing.replica",
    "corral.routing.breaker",
    "corral.tenancy.ledger",
    "corral.tenancy.usage",
    "corral.tenancy.sinks",
    "corral.telemetry.labels",
    "corral.lane.client",
    "corral.lane.frames",
    # the backend's side of a lane call
    "corral.lane.server",
    "corral.backends.engine",
)


def source_of(module: str) -> Path:
    return ROOT.parent / (module.replace(".", "/") + ".py")


def library() -> Path | None:
    """The group's shared library, which holds the compiled code of every module (each module's own `.so` only
    loads its part), or None when they are not compiled."""
    return next(ROOT.parent.glob(GROUP + "__mypyc.cpython-*.so"), None)


def stale() -> list[str]:
    """The compiled modules whose source is newer than the build."""
    built = library()
    if built is None:
        return []
    built_s = built.stat().st_mtime
    return [module for module in MODULES if source_of(module).stat().st_mtime > built_s]


def compiled() -> list[str]:
    """The modules imported from their build (after `guard`, which may have sent them to their source)."""
    return [
        name
        for name in MODULES
        if (module := sys.modules.get(name)) is not None and str(module.__file__).endswith(".so")
    ]


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of `MODULES` as their `.py` source, before the path finder would find their build."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        source = source_of(fullname)
        return importlib.util.spec_from_file_location(
            fullname, source, loader=importlib.machinery.SourceFileLoader(fullname, str(source))
        )


def guard() -> None:
    """Run the sources instead of the builds when `CORRAL_NATIVE=0`, or when a build is older than its source."""
    if any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        return
    if os.environ.get(NATIVE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        sys.meta_path.insert(0, _SourceFinder())
        return
    old = stale()
    if old:
        sys.stderr.write(
            f"corral: the compiled {', '.join(old)} {'is' if len(old) == 1 else 'are'} older than the source; "
            f"running the request path's modules as Python (run `make native` to compile them again)\n"
        )
        sys.meta_path.insert(0, _SourceFinder())

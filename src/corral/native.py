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

mypyc's rules for these modules (`tests/unit/test_native_rules.py` holds the first four to the source):
* no async generators (`asynccontextmanager` included);
* no classes created or subclassed at run time (`type(name, bases, ns)`);
* one exception type per `except ... as name` in a function (mypyc types the name by its first clause);
* an exception class's class attributes are `ClassVar` (a plain one a subclass sets again is missing on it);
* attributes declared on the class, not only set by a base written in Python;
* values that match their annotations at run time: a stub that says `bytes` or `tuple` where the library gives
  None or a list fails there (read it as `Any`), and a `float` parameter turns 1 into 1.0 (`int | float` keeps it).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.resources
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

NATIVE_ENV = "CORRAL_NATIVE"  # "0": run the compiled modules' sources, as Python
GROUP = "corral_native"  # mypyc's shared library of the group (`corral_native__mypyc.*.so`, beside `corral/`)
ROOT = Path(str(importlib.resources.files("corral")))  # the package's directory (its modules' sources)

MODULES = (
    # the frontend's warm path, in the order a request meets them
    "corral.runtime.httpguard",
    "corral.frontend.direct_path",
    "corral.frontend.limits",
    "corral.frontend.bounds",
    "corral.frontend.access",
    "corral.frontend.hot_path",
    "corral.frontend.inference.chat_wire",
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
)


def source_of(module: str, tree: Path = ROOT.parent) -> Path:
    """A module's source in `tree` (the directory that holds `corral/`)."""
    return tree / (module.replace(".", "/") + ".py")


def library(tree: Path = ROOT.parent) -> Path | None:
    """The group's shared library in `tree`, which holds the compiled code of every module (each module's own
    `.so` only loads its part), or None when they are not compiled."""
    return next(tree.glob(GROUP + "__mypyc.cpython-*.so"), None)


def stale(tree: Path = ROOT.parent) -> list[str]:
    """The compiled modules whose source is newer than the build (none when nothing is compiled)."""
    built = library(tree)
    if built is None:
        return []
    built_s = built.stat().st_mtime
    return [module for module in MODULES if _mtime_s(source_of(module, tree)) > built_s]


def _mtime_s(source: Path) -> float:
    try:
        return source.stat().st_mtime
    except FileNotFoundError:  # listed, not in this tree (a module moved): nothing of it can be stale
        return 0.0


def compiled() -> list[str]:
    """The modules imported from their build (after `guard`, which may have sent them to their source)."""
    return [
        name
        for name in MODULES
        if (module := sys.modules.get(name)) is not None
        and module.__spec__ is not None
        and str(module.__spec__.origin).endswith(".so")
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

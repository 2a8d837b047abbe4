"""Compile the request path's modules (corral.native.MODULES) with mypyc, in place: `make native`.

Their builds go beside their sources (`corral/.../x.cpython-311-*.so`, and the group's shared library
`corral_native__mypyc.*.so` beside `corral/`); `make clean-native` removes them. mypyc reads the same mypy settings
as `make lint` (pyproject.toml [tool.mypy]).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mypyc.build import mypycify
from setuptools import setup

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)  # mypy's settings (pyproject.toml) map src/corral/... to corral...
sys.path.insert(0, str(ROOT / "src"))

from corral import native  # noqa: E402  (after the path: this checkout's corral)

# the builds of an earlier list go first: a module's `.so` left behind would load from a group that lacks it
for old in (ROOT / "src").rglob("*.so"):
    old.unlink()

setup(
    name="corral-native",
    packages=[],
    ext_modules=mypycify(
        [str(native.source_of(module).relative_to(ROOT)) for module in native.MODULES],
        opt_level="3",
        group_name=native.GROUP,
        verbose=False,
    ),
    script_args=["-q", "build_ext", "--inplace", "--build-temp", str(ROOT / "build/native")],
)

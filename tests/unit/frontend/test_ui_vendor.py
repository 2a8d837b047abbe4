"""The web UI's vendored libraries (scripts/vendor-ui.sh): served as ES modules and CSS, each with its licence
beside it, and the very versions package-lock.json pins (so the copies are reproducible from the registry)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from corral.frontend.ui_routes import UI_DIR, build_ui_router, load_assets

ROOT = Path(__file__).resolve().parents[3]
LIBRARIES = {
    "preact": ["preact.module.js", "hooks.module.js"],
    "htm": ["htm.module.js"],
    "uplot": ["uPlot.esm.js"],
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(build_ui_router(load_assets()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://frontend") as c:
        yield c


async def test_vendored_modules_and_css_are_served_with_their_types(client: httpx.AsyncClient) -> None:
    for library, files in LIBRARIES.items():
        for name in files:
            response = await client.get(f"/app/assets/vendor/{library}/{name}")
            assert response.status_code == 200, name
            assert response.headers["content-type"].startswith("text/javascript"), name
    css = await client.get("/app/assets/vendor/uplot/uPlot.min.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_each_library_ships_its_licence_and_the_locked_version() -> None:
    vendor = UI_DIR.joinpath("vendor")
    versions = dict(
        line.split(" ", 1) for line in vendor.joinpath("VERSIONS.txt").read_text().splitlines()[1:] if line
    )
    lock = json.loads((ROOT / "package-lock.json").read_text())["packages"]
    for library in LIBRARIES:
        licence = vendor.joinpath(library, "LICENSE").read_text()
        assert "MIT License" in licence or "Apache License" in licence, (
            library
        )  # preact, uplot: MIT; htm: Apache-2.0
        assert versions[library] == lock[f"node_modules/{library}"]["version"], library


def test_the_ui_imports_the_libraries_only_through_lib_js() -> None:
    """One file names the vendored paths, so a version change touches it alone."""
    for name, body in load_assets().items():
        if name.startswith("js/") and name != "js/lib.js":
            assert b"vendor/preact" not in body and b"vendor/htm" not in body, name

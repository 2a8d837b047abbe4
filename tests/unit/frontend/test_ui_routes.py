"""The web UI's static serving: client-side routes answer index.html, assets only from the committed set."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from corral.frontend.ui_routes import UI_DIR, build_ui_router, load_assets

IMPORT = re.compile(r"""(?:import|from)\s*(?:[^"';]*?\sfrom\s*)?["'](\.{1,2}/[^"']+)["']""")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    app.include_router(build_ui_router(load_assets()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://frontend") as c:
        yield c


@pytest.mark.parametrize(
    "path",
    ["/app", "/app/", "/app/nodes/0b0e6c1e-1111-4222-8333-944455556666", "/app/models", "/app/anything/else"],
)
async def test_every_client_side_route_answers_the_index_page(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/app/assets/js/app.js">' in response.text
    assert "script-src 'self'" in response.headers["content-security-policy"]  # no inline or remote script


async def test_assets_are_served_with_their_type_and_unknown_names_are_404(client: httpx.AsyncClient) -> None:
    js = await client.get("/app/assets/js/app.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    css = await client.get("/app/assets/app.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    for missing in ("/app/assets/nope.js", "/app/assets/%2e%2e/%2e%2e/app.py", "/app/assets/" + "a" * 5000):
        response = await client.get(missing)
        assert response.status_code == 404, missing
        assert len(response.text) < 200  # the requested name is quoted cut short
    outside = await client.get("/app/assets/../../ui_routes.py")  # only committed names are ever served
    assert "build_ui_router" not in outside.text


def test_every_module_import_resolves_to_a_committed_asset() -> None:
    """No build step: a typo in an import path would only show as a blank page in a browser."""
    assets = load_assets()
    modules = [name for name in assets if name.endswith(".js")]
    assert "js/app.js" in modules
    for name in modules:
        base = name.rsplit("/", 1)[0]
        for spec in IMPORT.findall(assets[name].decode()):
            parts = [*base.split("/"), *spec.split("/")]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                elif part != ".":
                    resolved.append(part)
            assert "/".join(resolved) in assets, f"{name} imports {spec}, which is not under {UI_DIR}"


def test_no_asset_reaches_outside_this_origin() -> None:
    """Nothing is fetched from a CDN at run time."""
    for name, body in load_assets().items():
        assert not re.search(rb"""(src|href)\s*=\s*["']https?://""", body), name
        assert b'import("http' not in body and b'from "http' not in body, name

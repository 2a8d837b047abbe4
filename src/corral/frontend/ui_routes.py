"""The web UI: `/app` and every client-side route under it answer `index.html`; `/app/assets/<file>`
answers the ES modules and CSS committed in `frontend/ui/` (no build step, no CDN): the pages (Preact
components written with htm) and, under `vendor/`, the libraries copied from the npm registry by
scripts/vendor-ui.sh with their licences (Preact, htm, uPlot). Their bare imports are rewritten to relative
paths there, since the CSP below forbids the inline script an import map would need.

The files are read once when the app is built (a few dozen kB), so serving one is a dict lookup;
only names present in the directory are served, so no path from a request reaches the filesystem.
The pages hold no data: they are open like `/healthz`, and every API call they make carries the
admin key the operator typed (kept in the tab's sessionStorage).
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import PurePosixPath

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

UI_DIR = resources.files("corral.frontend").joinpath("ui")  # package data: found in a wheel too
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# The page runs only its own scripts and styles and talks only to this origin. It plays speech it fetched itself
# (the Models page's Try panel): an object URL of the answer's bytes, hence `media-src blob:`.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def load_assets(root: Traversable = UI_DIR) -> dict[str, bytes]:
    """Relative path → bytes of every servable file under `root`."""
    assets: dict[str, bytes] = {}
    todo: list[tuple[str, Traversable]] = [("", root)]
    while todo:
        prefix, folder = todo.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                todo.append((f"{prefix}{entry.name}/", entry))
            elif PurePosixPath(entry.name).suffix in CONTENT_TYPES:
                assets[prefix + entry.name] = entry.read_bytes()
    return assets


def _answer(name: str, body: bytes, cache: str) -> Response:
    return Response(
        body,
        media_type=CONTENT_TYPES[PurePosixPath(name).suffix],
        headers={"Cache-Control": cache, "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"},
    )


def build_ui_router(assets: dict[str, bytes]) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    index = assets.get("index.html", b"<!doctype html><title>corral</title><p>web UI assets are missing")

    @router.get("/app")
    async def app_root() -> Response:
        return _answer("index.html", index, "no-cache")

    @router.get("/")
    async def root() -> Response:
        return RedirectResponse("/app", status_code=307)

    @router.get("/app/{route:path}")
    async def app_route(route: str) -> Response:
        if route.startswith("assets/"):
            body = assets.get(route.removeprefix("assets/"))
            if body is None:
                return Response(f"no such UI asset: {route[:80]}", status_code=404, media_type="text/plain")
            return _answer(route, body, "no-cache")  # revalidated: a new release's files are used at once
        return _answer("index.html", index, "no-cache")  # a client-side route (/app/nodes/<id>, …)

    return router

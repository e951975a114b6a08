"""The trajectory viewer: static files (HTML, ES modules, CSS) served at ``/ui``; no build step.

The page reads only the REST API under ``/api``. Everything it shows comes from agents and is
untrusted, so the page builds DOM nodes with ``textContent`` only, and its responses carry a
Content-Security-Policy that allows nothing but this origin's own scripts, styles and API.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

STATIC_DIR = Path(__file__).parent / "static"

# Explicit types: some systems map .js to text/plain, which browsers refuse for ES modules.
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

# data: for the empty favicon only (without a <link rel=icon> the browser asks for /favicon.ico).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def static_files(root: Path = STATIC_DIR) -> dict[str, Path]:
    """The servable files by URL path; a fixed map, so no request path ever reaches the file system."""
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file() and p.suffix in MEDIA_TYPES}


def create_router() -> APIRouter:
    files = static_files()
    router = APIRouter(include_in_schema=False)

    def serve(path: str) -> FileResponse:
        file = files.get(path)
        if file is None:
            raise HTTPException(status_code=404, detail=f"no viewer file {path!r}")
        return FileResponse(file, media_type=MEDIA_TYPES[file.suffix], headers=HEADERS)

    @router.get("/ui")
    async def ui_root() -> RedirectResponse:
        # The page loads its modules by relative URLs, which resolve against /ui/, not /ui.
        return RedirectResponse("ui/")

    @router.get("/ui/")
    async def ui_index() -> FileResponse:
        return serve("index.html")

    @router.get("/ui/{path:path}")
    async def ui_file(path: str) -> FileResponse:
        return serve(path)

    return router

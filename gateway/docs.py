"""`/docs`: Swagger UI with its assets served from the installed swagger_ui_bundle package.

FastAPI's default page loads Swagger UI from a CDN; the gateway often runs where nothing outside
is reachable, so the page points at the package's copy instead.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs (create the app with ``docs_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

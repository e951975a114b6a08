"""`/docs`: Swagger UI with its assets served from the installed swagger_ui_bundle package, and the OpenAPI
document's rollout token parameter.

FastAPI's default page loads Swagger UI from a CDN; the gateway often runs where nothing outside
is reachable, so the page points at the package's copy instead.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from gateway.request.identity import TOKEN_PATTERN

ASSETS = "/docs/assets"
TOKEN_PARAMETER = {
    "name": "token",
    "in": "path",
    "required": True,
    "description": "The rollout's token: POST /api/rollouts returns it, in its base_url",
    "schema": {"type": "string", "pattern": f"^{TOKEN_PATTERN}$"},
}


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at /docs (create the app with ``docs_url=None``), and document the token."""
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")
    document_token(app)

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url,
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )


def document_token(app: FastAPI) -> None:
    """Every ``/r/{token}/`` operation names its ``token`` path parameter in the OpenAPI document. The model
    endpoints read the token from the path themselves (``(request, state)``, for ``gateway.boundary.model_lane``),
    so FastAPI sees no parameter; without it, clients and fuzzers built on the document cannot call them."""
    generate = app.openapi

    def openapi() -> dict:
        schema = generate()  # built once and kept (gateway.errors.document_errors): this adds the token once
        for path, operations in schema.get("paths", {}).items():
            if "{token}" not in path:
                continue
            for operation in operations.values():
                parameters = operation.setdefault("parameters", [])
                if not any(p.get("name") == "token" and p.get("in") == "path" for p in parameters):
                    parameters.insert(0, TOKEN_PARAMETER)
        return schema

    app.openapi = openapi

"""Gateway errors and their one mapping to HTTP responses.

Every error leaves the gateway as JSON in the dialect of the endpoint that raised it (OpenAI's
``{"error": {...}}`` here; later dialects add their shape in ``error_body``), never a traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger(__name__)


class GatewayError(Exception):
    status_code = 500
    type = "server_error"

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message, self.code, self.param, self.headers = message, code, param, headers or {}


class InvalidRequest(GatewayError):
    status_code = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status_code = 401
    type = "authentication_error"


class NotFound(GatewayError):
    status_code = 404
    type = "not_found_error"


class PayloadTooLarge(GatewayError):
    status_code = 413
    type = "invalid_request_error"


class EngineUnavailable(GatewayError):
    """The engine cannot be reached; the client should retry later."""

    status_code = 503
    type = "engine_unavailable"

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message, code="engine_unavailable", headers={"Retry-After": str(retry_after_s)})


class EngineError(GatewayError):
    """The engine answered with an error; its status and text are passed on."""

    def __init__(self, status_code: int, message: str, type: str | None = None):
        super().__init__(message, code="engine_error")
        self.status_code = status_code
        self.type = type or ("invalid_request_error" if status_code < 500 else "engine_error")


def error_body(exc: GatewayError) -> dict:
    return {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}


def describe_validation_error(exc: ValidationError | RequestValidationError) -> tuple[str, str | None]:
    """A one-line message naming each bad field, and the first field as ``param``."""
    parts, first = [], None
    for error in exc.errors()[:5]:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        first = first or loc or None
        parts.append(f"{loc}: {error.get('msg')}" if loc else str(error.get("msg")))
    return "; ".join(parts) or "invalid request body", first


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def _gateway_error(_request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = describe_validation_error(exc)
        return JSONResponse(error_body(InvalidRequest(message, param=param)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = GatewayError(str(exc.detail))
        error.status_code = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(error_body(error), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        error = GatewayError(f"internal error: {type(exc).__name__}: {exc}")
        return JSONResponse(error_body(error), status_code=500)

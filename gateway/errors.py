"""Gateway errors and their one mapping to HTTP responses.

Every error leaves the gateway as JSON in the dialect of the endpoint that raised it (OpenAI's
``{"error": {...}}`` here; later dialects add their shape in ``error_body``), never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

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


class Conflict(GatewayError):
    status_code = 409
    type = "conflict_error"


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
    """OpenAI's error shape (Chat Completions, Completions, Responses, and the REST API)."""
    return {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}


ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
                   503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error_body(exc: GatewayError) -> dict:
    """Anthropic's error shape, for the Messages API."""
    kind = ANTHROPIC_TYPES.get(exc.status_code, "invalid_request_error" if exc.status_code < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def _shape_for(request: Request) -> Callable[[GatewayError], dict]:
    path = request.url.path
    return anthropic_error_body if path.endswith(("/messages", "/messages/count_tokens")) else error_body


def describe_validation_error(exc: ValidationError | RequestValidationError) -> tuple[str, str | None]:
    """A one-line message naming each bad field, and the first field as ``param``."""
    parts, first = [], None
    for error in exc.errors()[:5]:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        first = first or loc or None
        parts.append(f"{loc}: {error.get('msg')}" if loc else str(error.get("msg")))
    return "; ".join(parts) or "invalid request body", first


def install_error_handlers(app: FastAPI) -> None:
    def respond(request: Request, exc: GatewayError) -> JSONResponse:
        state = getattr(request.app.state, "gateway", None)
        if state is not None:  # counted here, the one place every failure passes
            engine_kind = exc.code if isinstance(exc, (EngineError, EngineUnavailable)) else None
            state.metrics.failed(request.url.path, exc.status_code, engine_kind)
        return JSONResponse(_shape_for(request)(exc), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return respond(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = describe_validation_error(exc)
        return respond(request, InvalidRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = GatewayError(str(exc.detail), headers=exc.headers)
        error.status_code = exc.status_code
        error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return respond(request, error)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error")
        return respond(request, GatewayError(f"internal error: {type(exc).__name__}: {exc}"))

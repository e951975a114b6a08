"""Gateway errors and their one mapping to HTTP responses.

Every error leaves the gateway as JSON in the dialect of the endpoint that raised it (OpenAI's
``{"error": {...}}``, Anthropic's ``{"type": "error", "error": {...}}`` on the Messages routes), never
a traceback: an unexpected exception is logged once under an error id, and the 500 body names only
that id. The store failing for a while (SQLite locked by another process past its busy timeout, a full
disk) is no surprise: a 503 with Retry-After (``store_failure``), on every route.
"""

from __future__ import annotations

import errno
import logging
import secrets
import sqlite3
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway.dialects import dialect_at, openai_error_body

logger = logging.getLogger(__name__)

ERROR_ID_HEADER = "x-harnessrl-error-id"


class GatewayError(Exception):
    status_code = 500
    type = "server_error"

    def __init__(
        self, message: str, *, code: str | None = None, param: str | None = None, headers: dict[str, str] | None = None
    ):
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


class UnsupportedMediaType(GatewayError):
    status_code = 415
    type = "invalid_request_error"


class StoreUnavailable(GatewayError):
    """The store cannot read or write for now (locked by another process, disk full); retry later."""

    status_code = 503
    type = "store_unavailable"

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message, code="store_unavailable", headers={"Retry-After": str(retry_after_s)})


class TooManyRequests(GatewayError):
    """A client over one of its limits (a live key opening sessions too fast); retry after the header."""

    status_code = 429
    type = "rate_limit_error"

    def __init__(self, message: str, code: str, retry_after_s: int = 1):
        super().__init__(message, code=code, headers={"Retry-After": str(retry_after_s)})


class EngineUnavailable(GatewayError):
    """The engine cannot be reached; the client should retry later."""

    status_code = 503
    type = "engine_unavailable"

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message, code="engine_unavailable", headers={"Retry-After": str(retry_after_s)})


class EngineBusy(GatewayError):
    """Every in-flight slot of the rollout's engine is taken and its queue is full (back-pressure)."""

    status_code = 503
    type = "engine_overloaded"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, code="engine_busy", headers={"Retry-After": str(retry_after_s)})


class EngineTimeout(GatewayError):
    """The engine did not answer within the gateway's engine timeout."""

    status_code = 504
    type = "engine_timeout"

    def __init__(self, message: str):
        super().__init__(message, code="engine_timeout")


class EngineError(GatewayError):
    """The engine answered with an error; its status and text are passed on."""

    def __init__(self, status_code: int, message: str, type: str | None = None):
        super().__init__(message, code="engine_error")
        self.status_code = status_code
        self.type = type or ("invalid_request_error" if status_code < 500 else "engine_error")


error_body = openai_error_body  # the streams' name for OpenAI's shape (gateway.openai.stream)


def shape_for(path: str) -> Callable[[GatewayError], dict]:
    """The error shape of the dialect served at ``path`` (gateway.dialects)."""
    return dialect_at(path).error_body


def error_response(path: str, exc: GatewayError) -> JSONResponse:
    return JSONResponse(shape_for(path)(exc), status_code=exc.status_code, headers=exc.headers)


def count_failure(app, path: str, exc: GatewayError) -> None:
    """Counted in the gateway's metrics: every failure passes here once."""
    state = getattr(app.state, "gateway", None)
    if state is not None:
        engine_kind = exc.code if isinstance(exc, (EngineError, EngineUnavailable, EngineTimeout)) else None
        state.books.metrics.failed(path, exc.status_code, engine_kind)


def internal_error(error_id: str) -> GatewayError:
    return GatewayError(
        f"internal error {error_id}: the gateway's log holds the details under this id",
        code="internal_error",
        headers={ERROR_ID_HEADER: error_id},
    )


# How the store says it cannot serve for now. SQLite: by the primary result code (an extended code's low
# byte) where the error carries one, else by its words: BUSY (a lock held past the busy timeout), LOCKED (a
# table or schema lock), PROTOCOL (the WAL index's locks in the -shm file kept failing: another process holds
# them) are all another connection's locks; FULL is the disk. PostgreSQL: SQLSTATEs (disk full, out of
# memory, too many connections, lock not available).
_SQLITE_LOCKED = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL}
_SQLITE_FULL = {sqlite3.SQLITE_FULL}
_STORE_LOCKED = ("database is locked", "database table is locked", "database schema is locked", "locking protocol")
_STORE_FULL = ("database or disk is full",)
_PG_PASSING = {"53100", "53200", "53300", "55P03"}


def store_failure(exc: BaseException) -> StoreUnavailable | None:
    """``exc`` as a 503 when it is the store failing for a while (None: any other exception)."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc  # SQLAlchemy wraps it
    if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT):
        return _store_full()
    if isinstance(cause, sqlite3.Error) or isinstance(exc, DBAPIError):
        if _sqlite_says(cause, _SQLITE_LOCKED, _STORE_LOCKED):
            return StoreUnavailable(
                "the store is locked by another process (it held SQLite's locks longer than the gateway waits); retry "
                "shortly. One process should write a SQLite store: give others its gateway's URL, or use "
                "PostgreSQL for several"
            )
        if _sqlite_says(cause, _SQLITE_FULL, _STORE_FULL):
            return _store_full()
    if getattr(cause, "sqlstate", None) in _PG_PASSING or getattr(cause, "pgcode", None) in _PG_PASSING:
        return StoreUnavailable(f"the store cannot serve this request now ({type(cause).__name__}); retry shortly")
    return None


def _sqlite_says(cause: BaseException, codes: set[int], words: tuple[str, ...]) -> bool:
    code = getattr(cause, "sqlite_errorcode", None)  # sqlite3's errors carry it (Python 3.11), others not
    if isinstance(code, int):
        return code & 0xFF in codes
    text = str(cause).lower()
    return any(said in text for said in words)


def _store_full() -> StoreUnavailable:
    return StoreUnavailable(
        "the store cannot write: its disk is full; retry later (the operator frees space where the database lives)",
        retry_after_s=30,
    )


def failure_of(exc: BaseException, where: str) -> GatewayError:
    """An exception no handler mapped, as what the client gets: a store failing for a while is a 503
    (logged as a warning), anything else a 500 naming an error id, its traceback logged under that id."""
    if isinstance(exc, GatewayError):
        return exc
    error = store_failure(exc)
    if error is not None:
        logger.warning("%s: %s (%s: %s)", where, error.message, type(exc).__name__, exc)
        return error
    error_id = f"err-{secrets.token_hex(6)}"
    logger.error("%s: unhandled error in %s", error_id, where, exc_info=exc)
    return internal_error(error_id)


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
        count_failure(request.app, request.url.path, exc)
        return error_response(request.url.path, exc)

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

    # Unexpected exceptions: not a handler (Starlette re-raises after one, so the server logs a second
    # traceback) but the app's ASGI boundary (gateway.boundary.server_errors) answers and logs once.
    document_errors(app)


# --- the error shapes in the OpenAPI document ------------------------------------------------


def document_errors(app: FastAPI) -> None:
    """Every operation documents its errors as they are sent: 4xx/5xx in the dialect's shape.

    (FastAPI documents a 422 with its own body; the gateway answers bad input with a 400 instead.)
    """
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        for path, operations in schema.get("paths", {}).items():
            error_schema = dialect_at(path).error_schema
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                responses["default"] = {
                    "description": "An error, in the dialect's shape",
                    "content": {"application/json": {"schema": error_schema}},
                }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi

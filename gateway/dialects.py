"""The wire dialects, one description each: where it is served, its error shape and its metrics label.

Errors (gateway.errors), metrics (gateway.metrics), the conversation view (gateway.api.conversation)
and the routers read these; a new dialect is one more ``Dialect`` here plus its own package (serving,
protocol, stream, router), as vLLM's entrypoints share a base beside their per-endpoint folders.

This module is a leaf (it imports nothing of the gateway), so that gateway.errors, which every package
imports, can read it. How a recorded request reads as chat messages is the conversation view's, which
sits above the dialect packages and imports their translations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class ErrorFields(Protocol):
    """What an error shape reads of an error (gateway.errors.GatewayError has these)."""

    status_code: int
    message: str
    type: str
    param: str | None
    code: str | None


ROLLOUT_PREFIX = "/r/"  # per-rollout routes: /r/{token}/v1/...
API_PREFIXES = ("/v1", "/r/{token}/v1")  # every dialect route is served under both


def rollout_path(path: str) -> tuple[str, str] | None:
    """A per-rollout path's token and what follows its slash (``/r/TOKEN/v1/...`` -> ``("TOKEN",
    "v1/...")``), as the routes' ``{token}`` reads it: None for any other path, or an empty token."""
    if not path.startswith(ROLLOUT_PREFIX):
        return None
    token, slash, rest = path[len(ROLLOUT_PREFIX) :].partition("/")
    return (token, rest) if token and slash else None


def openai_error_body(exc: ErrorFields) -> dict:
    """OpenAI's error shape (Chat Completions, Completions, Responses, and the REST API)."""
    return {"error": {"message": exc.message, "type": exc.type, "param": exc.param, "code": exc.code}}


ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_body(exc: ErrorFields) -> dict:
    """Anthropic's error shape, for the Messages API."""
    kind = ANTHROPIC_TYPES.get(exc.status_code, "invalid_request_error" if exc.status_code < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


_NULLABLE_STRING = {"anyOf": [{"type": "string"}, {"type": "null"}]}
OPENAI_ERROR_SCHEMA = {
    "title": "ErrorBody",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": _NULLABLE_STRING,
                "code": _NULLABLE_STRING,
            },
        }
    },
}
ANTHROPIC_ERROR_SCHEMA = {
    "title": "AnthropicErrorBody",
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


@dataclass(frozen=True)
class Dialect:
    name: str  # the recorded calls' `dialect` column and the metrics label
    routes: tuple[str, ...]  # paths under each of API_PREFIXES
    error_body: Callable[[ErrorFields], dict]  # its error shape, for every error its routes answer
    error_schema: dict  # that shape in the OpenAPI document
    recorded: bool = True  # its calls are recorded (count_tokens answers without sampling)


CHAT = Dialect("chat", ("/chat/completions",), openai_error_body, OPENAI_ERROR_SCHEMA)
COMPLETIONS = Dialect("completions", ("/completions",), openai_error_body, OPENAI_ERROR_SCHEMA)
RESPONSES = Dialect("responses", ("/responses",), openai_error_body, OPENAI_ERROR_SCHEMA)
MESSAGES = Dialect("messages", ("/messages",), anthropic_error_body, ANTHROPIC_ERROR_SCHEMA)
COUNT_TOKENS = Dialect(
    "count_tokens", ("/messages/count_tokens",), anthropic_error_body, ANTHROPIC_ERROR_SCHEMA, recorded=False
)
DIALECTS = (CHAT, COMPLETIONS, RESPONSES, MESSAGES, COUNT_TOKENS)
BY_NAME = {dialect.name: dialect for dialect in DIALECTS}
# Everything else (/v1/models, the REST API, /admin, /metrics, the viewer) answers in OpenAI's shape.
OTHER = Dialect("other", (), openai_error_body, OPENAI_ERROR_SCHEMA, recorded=False)

_BY_ROUTE = {f"/v1{route}": dialect for dialect in DIALECTS for route in dialect.routes}


def dialect_at(path: str) -> Dialect:
    """The dialect served at a request path (``/v1/messages``, ``/r/<token>/v1/messages``) or at a route
    template (``/r/{token}/v1/messages``, as the OpenAPI document names it); OTHER elsewhere."""
    if path.startswith(ROLLOUT_PREFIX):
        _, _, path = path[len(ROLLOUT_PREFIX) :].partition("/")
        path = "/" + path
    return _BY_ROUTE.get(path, OTHER)


def recorded_dialect(name: str) -> Dialect:
    """The dialect a recorded call names (its `dialect` column); OTHER for a name no dialect has."""
    return BY_NAME.get(name, OTHER)

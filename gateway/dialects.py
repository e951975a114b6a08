"""The wire dialects, one description each: where it is served, its error shape, its metrics label and
how a recorded request reads as chat messages.

Errors (gateway.errors), metrics (gateway.metrics), the conversation view (gateway.api.conversation)
and the routers read these; a new dialect is one more ``Dialect`` here plus its own package (serving,
protocol, replay, router), as vLLM's entrypoints share a base beside their per-endpoint folders.

This module is a leaf: what it needs of the dialect packages it imports when called, so that
gateway.errors (which every package imports) can read it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.errors import GatewayError

ROLLOUT_PREFIX = "/r/"  # per-rollout routes: /r/{token}/v1/...
API_PREFIXES = ("/v1", "/r/{token}/v1")  # every dialect route is served under both


def openai_error_body(exc: GatewayError) -> dict:
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


def anthropic_error_body(exc: GatewayError) -> dict:
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


# --- a recorded request as chat messages (the conversation view) ----------------------------------


def _chat_history(request: dict) -> list[dict]:
    messages = request.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _completions_history(request: dict) -> list[dict]:
    prompt = request.get("prompt")
    return [{"role": "user", "content": prompt if isinstance(prompt, str) else json.dumps(prompt)}]


def _responses_history(request: dict) -> list[dict]:
    from gateway.responses.protocol import ResponsesRequest
    from gateway.responses.serving import chat_messages

    return chat_messages(ResponsesRequest.model_validate(request))


def _messages_history(request: dict) -> list[dict]:
    from gateway.anthropic.protocol import MessagesRequest
    from gateway.anthropic.serving import chat_messages

    return chat_messages(MessagesRequest.model_validate(request))


def _no_history(request: dict) -> list[dict]:
    return []


@dataclass(frozen=True)
class Dialect:
    name: str  # the recorded calls' `dialect` column and the metrics label
    routes: tuple[str, ...]  # paths under each of API_PREFIXES
    error_body: Callable[[GatewayError], dict]  # its error shape, for every error its routes answer
    error_schema: dict  # that shape in the OpenAPI document
    # a recorded request body -> the chat messages the engine was prompted with (ValidationError or
    # GatewayError for a body that no longer parses)
    history: Callable[[dict], list[dict]] = _no_history
    recorded: bool = True  # its calls are recorded (count_tokens answers without sampling)


CHAT = Dialect("chat", ("/chat/completions",), openai_error_body, OPENAI_ERROR_SCHEMA, _chat_history)
COMPLETIONS = Dialect("completions", ("/completions",), openai_error_body, OPENAI_ERROR_SCHEMA, _completions_history)
RESPONSES = Dialect("responses", ("/responses",), openai_error_body, OPENAI_ERROR_SCHEMA, _responses_history)
MESSAGES = Dialect("messages", ("/messages",), anthropic_error_body, ANTHROPIC_ERROR_SCHEMA, _messages_history)
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

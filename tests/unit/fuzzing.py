"""Property-based requests (schemathesis) against the gateway in process, with the checks the fuzz tier asks:
no 5xx, every response in its documented shape, and no rejected request leaving a row in the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic.json_schema import models_json_schema
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.anthropic.protocol import CountTokensRequest, Message, MessagesRequest, TokenCount
from gateway.dialects import ANTHROPIC_ERROR_SCHEMA, OPENAI_ERROR_SCHEMA
from gateway.openai.protocol import ChatCompletionRequest, CompletionRequest
from gateway.responses.protocol import Response, ResponsesRequest

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
TABLES = ("runs", "tasks", "groups", "rollouts", "calls", "adapters", "learner_steps")
FUZZ_HOST = asgi.HOST  # the Host header schemathesis' in-process client sends

# Chat Completions' answer has no pydantic model in the gateway (the engine's body is passed on).
_CHOICE = {
    "type": "object",
    "required": ["index", "finish_reason"],
    "properties": {"index": {"type": "integer"}, "message": {"type": "object"}, "text": {"type": "string"}},
}
CHAT_COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "object": {"const": "chat.completion"},
        "model": {"type": "string"},
        "choices": {"type": "array", "items": _CHOICE, "minItems": 1, "maxItems": 1},
    },
}
SSE_EVENT = {
    "type": "object",
    "required": ["data"],  # one server-sent event; its data is JSON or [DONE]
    "properties": {"data": {"type": "string", "minLength": 1}, "event": {"type": "string"}},
}
TEXT_COMPLETION = {
    **CHAT_COMPLETION,
    "properties": {**CHAT_COMPLETION["properties"], "object": {"const": "text_completion"}},
}


def row_counts(database_url: str) -> dict[str, int]:
    path = database_url.split(":///", 1)[1]
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return {table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}


def dialect_openapi(prefix: str) -> dict:
    """The three model dialects (and count_tokens) as an OpenAPI document: request and answer models."""
    models = [
        (ChatCompletionRequest, "validation"),
        (CompletionRequest, "validation"),
        (ResponsesRequest, "validation"),
        (MessagesRequest, "validation"),
        (CountTokensRequest, "validation"),
        (Response, "serialization"),
        (Message, "serialization"),
        (TokenCount, "serialization"),
    ]
    refs, defs = models_json_schema(models, ref_template="#/components/schemas/{model}")

    def operation(request, answer: dict, error: dict, stream: bool = True) -> dict:
        content = {"application/json": {"schema": answer}}
        if stream:
            content["text/event-stream"] = {"schema": SSE_EVENT}
        return {
            "post": {
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": refs[(request, "validation")]}},
                },
                "responses": {
                    "200": {"description": "the answer", "content": content},
                    "default": {"description": "an error", "content": {"application/json": {"schema": error}}},
                },
            }
        }

    return {
        "openapi": "3.1.0",
        "info": {"title": "model dialects", "version": "1"},
        "components": {"schemas": defs.get("$defs", {})},
        "paths": {
            f"{prefix}/chat/completions": operation(ChatCompletionRequest, CHAT_COMPLETION, OPENAI_ERROR_SCHEMA),
            f"{prefix}/completions": operation(CompletionRequest, TEXT_COMPLETION, OPENAI_ERROR_SCHEMA),
            f"{prefix}/responses": operation(ResponsesRequest, refs[(Response, "serialization")], OPENAI_ERROR_SCHEMA),
            f"{prefix}/messages": operation(MessagesRequest, refs[(Message, "serialization")], ANTHROPIC_ERROR_SCHEMA),
            f"{prefix}/messages/count_tokens": operation(
                CountTokensRequest, refs[(TokenCount, "serialization")], ANTHROPIC_ERROR_SCHEMA, stream=False
            ),
        },
    }


@contextmanager
def lifespan_of(app) -> Iterator[None]:
    """Schemathesis runs the app's lifespan on its own event loop thread; this ends it afterwards."""
    try:
        yield
    finally:
        asgi.shutdown_lifespans()


def fuzz(
    schema,
    database_url: str,
    headers: dict[str, str],
    max_examples: int,
    on_case: Callable[[object, object], None] | None = None,
) -> int:
    """Every operation of ``schema``, positive and negative cases; returns the number of requests sent."""
    sent = 0

    def check(case) -> None:
        nonlocal sent
        before = row_counts(database_url)
        response = case.call(headers=headers)
        sent += 1
        case.validate_response(response, checks=CHECKS)
        if response.status_code >= 400:
            assert row_counts(database_url) == before, f"rejected with {response.status_code} but left rows"
        if on_case is not None:
            on_case(case, response)

    for result in schema.get_all_operations():
        operation = result.ok()
        cases = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)
        )
        run = settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )(given(case=cases)(check))
        run()
    return sent


def rest_schema(app, headers: dict[str, str]):
    """The gateway's own OpenAPI document, its control plane only (/api, /admin)."""
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers).include(path_regex=r"^/(api|admin)/")


def rollout_routes_schema(app, headers: dict[str, str]):
    """The gateway's own OpenAPI document, its per-rollout model routes only (``/r/{token}/v1/...``): the
    token is a path parameter there, so each case sends a token of its own."""
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers).include(
        path_regex=r"^/r/\{token\}/v1/"
    )


def dialect_schema(app, prefix: str):
    schema = schemathesis.openapi.from_dict(dialect_openapi(prefix))
    schema.app = app
    return schema

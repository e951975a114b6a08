"""One Dialect description per wire dialect (gateway.dialects): the routers serve its routes, errors
take its shape, metrics its name, and the conversation view its request-to-chat conversion."""

from __future__ import annotations

from gateway.api.conversation import request_messages
from gateway.app import create_app
from gateway.dialects import API_PREFIXES, DIALECTS, MESSAGES, OTHER, dialect_at, rollout_path
from gateway.errors import GatewayError, InvalidRequest, shape_for
from gateway.metrics import GatewayMetrics
from tests.builders import gateway_settings


def test_every_dialect_route_is_served_under_both_prefixes_and_maps_back_to_its_dialect():
    app = create_app(gateway_settings("sqlite+aiosqlite://", "http://127.0.0.1:9"))
    served = {route.path for route in app.routes}
    for dialect in DIALECTS:
        for route in dialect.routes:
            for prefix in API_PREFIXES:
                assert f"{prefix}{route}" in served, (dialect.name, prefix, route)
                assert dialect_at(f"{prefix}{route}") is dialect
                assert dialect_at(f"{prefix}{route}".replace("{token}", "tok-123")) is dialect


def test_paths_that_only_end_like_a_dialect_route_are_not_that_dialect():
    for path in (
        "/api/rollouts/1/messages",
        "/admin/responses",
        "/v1/models",
        "/v2/chat/completions",
        "/r/tok/v1/messages/extra",
        "/r/tok",
    ):
        assert dialect_at(path) is OTHER, path


def test_errors_take_the_shape_of_the_dialect_at_the_path():
    error = InvalidRequest("bad", param="x")
    assert shape_for("/r/tok/v1/messages/count_tokens")(error) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    assert shape_for("/v1/responses")(error)["error"]["param"] == "x"
    assert shape_for("/api/runs")(GatewayError("boom"))["error"]["type"] == "server_error"


def test_failures_are_counted_under_the_dialects_name():
    metrics = GatewayMetrics()
    metrics.failed("/r/tok/v1/messages", 400, None)
    metrics.failed("/v1/models", 401, None)
    text = metrics.exposition().decode()
    assert 'harnessrl_calls_total{dialect="messages",status="400"} 1.0' in text
    assert 'harnessrl_calls_total{dialect="other",status="401"} 1.0' in text


def test_the_conversation_view_reads_each_dialects_history():
    assert request_messages("chat", {"messages": [{"role": "user", "content": "hi"}, "junk"]}) == [
        {"role": "user", "content": "hi"}
    ]
    assert request_messages("completions", {"prompt": "2+2="}) == [{"role": "user", "content": "2+2="}]
    anthropic = request_messages(
        MESSAGES.name,
        {"model": "policy", "max_tokens": 8, "system": "be brief", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert [m["role"] for m in anthropic] == ["system", "user"]
    responses = request_messages("responses", {"model": "policy", "input": "hi"})
    assert responses[-1]["role"] == "user"
    assert request_messages("messages", {"messages": "not a list"}) == []  # an older shape shows nothing


def test_a_rollout_path_names_its_token_only_when_a_slash_follows_a_non_empty_one():
    assert rollout_path("/r/hrl-abc/v1/chat/completions") == ("hrl-abc", "v1/chat/completions")
    assert rollout_path("/r/hrl-abc/") == ("hrl-abc", "")
    for path in ("/r//v1/chat/completions", "/r/hrl-abc", "/v1/chat/completions", "/rr/x/v1"):
        assert rollout_path(path) is None

"""The data plane: a rollout token opens the model endpoints of its own rollout, while it runs."""

from __future__ import annotations

import pytest

from tests.builders import chat_body, messages_body

# (method, path under /v1, body, error shape): the three dialects, count_tokens and models.
ENDPOINTS = [
    ("POST", "/chat/completions", chat_body(), "openai"),
    ("POST", "/completions", {"model": "policy", "prompt": "Hi"}, "openai"),
    ("POST", "/responses", {"model": "policy", "input": "Hi"}, "openai"),
    ("POST", "/messages", messages_body(), "anthropic"),
    ("POST", "/messages/count_tokens", messages_body(), "anthropic"),
    ("GET", "/models", None, "openai"),
]
IDS = [path for _, path, _, _ in ENDPOINTS]


def error_of(response, shape: str) -> dict:
    body = response.json()
    if shape == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error", body
        return body["error"]
    assert body["error"]["type"] == "authentication_error", body
    return body["error"]


async def num_calls(gateway) -> int:
    return len((await gateway.http.get("/api/calls", params={"limit": 1000})).json()["data"])


@pytest.mark.parametrize("status", ["finished", "failed"])
@pytest.mark.parametrize(("method", "path", "body", "shape"), ENDPOINTS, ids=IDS)
async def test_the_token_of_an_ended_rollout_is_refused_on_every_model_endpoint(
    gateway, method, path, body, shape, status
):
    rollout = await gateway.new_rollout()
    ok = await gateway.agent.request(method, f"/r/{rollout['token']}/v1{path}", json=body)
    assert ok.status_code == 200, ok.text
    ended = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": status})
    assert ended.status_code == 200, ended.text
    before = await num_calls(gateway)
    for url, headers in (
        (f"/r/{rollout['token']}/v1{path}", {}),
        (f"/v1{path}", {"authorization": f"Bearer {rollout['token']}"}),
        (f"/v1{path}", {"x-api-key": rollout["token"]}),
    ):
        refused = await gateway.agent.request(method, url, json=body, headers=headers)
        assert refused.status_code == 401, (url, refused.text)
        error = error_of(refused, shape)
        assert f"rollout {rollout['id']} has ended ({status})" in error["message"]
    assert await num_calls(gateway) == before


async def test_a_rollout_ended_by_another_gateway_is_refused_soon_after(gateway, sqlite_db, monkeypatch):
    """Two gateways on one store: an end written elsewhere is seen once the running answer expires."""
    from store import rollout_status
    from store.store import Store

    monkeypatch.setattr(rollout_status, "RUNNING_RECHECK_S", 0.0)
    rollout = await gateway.new_rollout()
    url = f"/r/{rollout['token']}/v1/chat/completions"
    assert (await gateway.agent.post(url, json=chat_body())).status_code == 200
    other = Store.from_url(sqlite_db)
    try:
        await other.end_rollout(rollout["id"], "finished")
    finally:
        await other.close()
    assert (await gateway.agent.post(url, json=chat_body())).status_code == 401


async def test_a_token_in_the_path_cannot_be_paired_with_another_rollouts_token(gateway):
    mine, sibling = await gateway.new_rollout(task="a"), await gateway.new_rollout(task="b")
    response = await gateway.agent.post(
        f"/r/{mine['token']}/v1/chat/completions",
        json=chat_body(),
        headers={"authorization": f"Bearer {sibling['token']}"},
    )
    assert response.status_code == 401 and "another rollout's token" in response.json()["error"]["message"]
    assert await num_calls(gateway) == 0


async def test_a_token_reaches_nothing_of_another_rollout(gateway):
    mine, sibling = await gateway.new_rollout(task="a"), await gateway.new_rollout(task="b")
    await gateway.agent.post(f"/r/{mine['token']}/v1/chat/completions", json=chat_body())
    await gateway.agent.post(f"/r/{sibling['token']}/v1/chat/completions", json=chat_body())
    bearer = {"authorization": f"Bearer {mine['token']}"}
    for method, path in (
        ("GET", f"/api/rollouts/{sibling['id']}/conversation"),
        ("GET", f"/api/rollouts/{sibling['id']}/calls"),
        ("GET", "/api/calls"),
        ("POST", f"/api/rollouts/{sibling['id']}/reward"),
        ("GET", "/admin/policy"),
    ):
        body = {"name": "x", "value": -1000.0} if method == "POST" else None
        response = await gateway.agent.request(method, path, headers=bearer, json=body)
        assert response.status_code == 401, (path, response.text)
    calls = (await gateway.http.get("/api/calls")).json()["data"]
    assert sorted(c["rollout_id"] for c in calls) == sorted([mine["id"], sibling["id"]])
    assert (await gateway.http.get(f"/api/rollouts/{sibling['id']}")).json()["reward"] is None


async def test_an_unknown_token_is_refused_and_a_running_one_is_served(strict_gateway):
    rollout = await strict_gateway.new_rollout()
    unknown = await strict_gateway.agent.post(f"/r/{rollout['token']}x/v1/chat/completions", json=chat_body())
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"
    ok = await strict_gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body())
    assert ok.status_code == 200


# Path segments that cannot be a rollout token (percent-encoded as a client sends them): non-ASCII, no prefix,
# characters tokens never hold (a NUL, which PostgreSQL refuses, never reaches the store), a live key (which the
# path never takes).
NOT_TOKENS = ["%C3%A0", "hrl-%C3%A0", "hrl-x%20y", "hrl-%00", "sk-1234", "hrl-", "hrl-live-abc"]


@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
@pytest.mark.parametrize(("method", "path", "body", "shape"), ENDPOINTS, ids=IDS)
async def test_a_path_token_that_cannot_be_a_token_is_a_401_in_the_routes_dialect(
    gateway, method, path, body, shape, header
):
    key = "Bearer hrl-x" if header == "authorization" else "hrl-x"  # a made-up key with the rollout prefix
    for token in NOT_TOKENS:
        refused = await gateway.agent.request(method, f"/r/{token}/v1{path}", json=body, headers={header: key})
        assert refused.status_code == 401, (token, refused.text)
        assert error_of(refused, shape)["message"]
    assert await num_calls(gateway) == 0

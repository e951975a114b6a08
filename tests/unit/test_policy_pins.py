"""Rollouts pinned to a policy (evaluation): served by their version whatever the agent asks for.

The agent holds only the rollout token: it cannot create a rollout, choose a pin or move its own to
another version, whichever model name it sends and wherever it sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.pinning import publish


@pytest.fixture
async def gw(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, max_staleness=1)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def pinned(gw: GatewayHarness, policy: str, **extra) -> dict:
    return await gw.new_rollout(run="eval", task="t", policy=policy, **extra)


async def agent_chat(gw: GatewayHarness, token: str, model: str) -> dict:
    response = await gw.agent.post(
        f"/r/{token}/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200, response.text
    calls = (await gw.http.get("/api/calls", params={"limit": 1000})).json()["data"]
    return calls[-1]


@pytest.mark.parametrize("asked", ["policy", "policy-v1", "policy-v2", "fake-base", "anything"])
async def test_a_rollout_pinned_to_base_is_served_by_base_whatever_model_the_agent_names(gw, asked):
    await publish(gw, 1)
    await publish(gw, 2)
    rollout = await pinned(gw, "base")
    call = await agent_chat(gw, rollout["token"], asked)
    assert (call["policy_version"], call["engine_model"]) == (0, "fake-base")
    assert gw.fake.requests[-1]["model"] == "fake-base"


async def test_a_rollout_pinned_to_a_version_keeps_it_when_the_agent_names_the_current_one(gw):
    await publish(gw, 1)
    rollout = await pinned(gw, "policy-v1")
    await publish(gw, 2)
    for asked in ("policy", "policy-v2", "fake-base"):
        call = await agent_chat(gw, rollout["token"], asked)
        assert (call["policy_version"], call["engine_model"]) == (1, "policy-v1")
    # the same names on an unpinned rollout: the current version (or the one named), as before
    free = await gw.new_rollout(run="train", task="t")
    assert (await agent_chat(gw, free["token"], "policy"))["policy_version"] == 2


async def test_latest_is_the_version_current_when_the_rollout_is_created(gw):
    await publish(gw, 1)
    rollout = await pinned(gw, "latest")
    await publish(gw, 2)
    assert (await agent_chat(gw, rollout["token"], "policy"))["policy_version"] == 1
    view = (await gw.http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert view["pinned_version"] == 1
    listed = (await gw.http.get("/api/rollouts", params={"run": "eval"})).json()["data"]
    assert [r["pinned_version"] for r in listed] == [1]


async def test_a_retired_version_is_loaded_again_for_a_rollout_pinned_to_it(gw):
    for version in (1, 2, 3):
        await publish(gw, version)
    assert "policy-v1" not in gw.fake.adapters  # max_staleness 1 retired it
    rollout = await pinned(gw, "policy-v1")
    assert gw.fake.adapters["policy-v1"] == "/adapters/v1"  # loaded from the store's path
    assert (await gw.http.get("/admin/policy")).json()["current_version"] == 3  # the current policy stays
    assert (await agent_chat(gw, rollout["token"], "policy"))["engine_model"] == "policy-v1"
    await publish(gw, 4)  # retires v1 again while the pinned rollout still runs
    assert "policy-v1" not in gw.fake.adapters
    call = await agent_chat(gw, rollout["token"], "policy")
    assert (call["policy_version"], call["engine_model"]) == (1, "policy-v1")


@pytest.mark.parametrize(
    ("policy", "status"),
    [("policy-v7", 404), ("policy-v0", 400), ("v1", 400), ("policy-v99999999999", 400), ("policy-v2147483648", 400)],
)
async def test_a_pin_to_an_unknown_or_malformed_version_creates_nothing(gw, policy, status):
    await publish(gw, 1)
    response = await gw.http.post("/api/rollouts", json={"run": "eval", "task": "t", "policy": policy})
    assert response.status_code == status, response.text
    assert (await gw.http.get("/api/rollouts", params={"run": "eval"})).json()["data"] == []


async def test_a_retried_create_returns_the_same_pinned_rollout_and_another_pin_is_a_conflict(gw):
    await publish(gw, 1)
    first = await pinned(gw, "latest", request_id="req-1")
    await publish(gw, 2)
    again = await pinned(gw, "latest", request_id="req-1")  # "latest" moved, but this is the same request
    assert again["id"] == first["id"]
    assert (await agent_chat(gw, again["token"], "policy"))["policy_version"] == 1
    other = await gw.http.post(
        "/api/rollouts", json={"run": "eval", "task": "t", "policy": "base", "request_id": "req-1"}
    )
    assert other.status_code == 409, other.text


async def test_an_agent_with_a_rollout_token_cannot_choose_or_change_a_pin(gw):
    """The attacking agent tries every door it holds: the control plane with its token, a create request
    of its own, and pin-like fields in its model calls. Its rollout stays on base."""
    await publish(gw, 1)
    rollout = await pinned(gw, "base")
    token = rollout["token"]
    for headers in ({"authorization": f"Bearer {token}"}, {"x-admin-key": token}, {"x-api-key": token}):
        created = await gw.agent.post(
            "/api/rollouts", headers=headers, json={"run": "eval", "task": "t", "policy": "latest"}
        )
        assert created.status_code == 401, created.text
    for path in (f"/r/{token}/api/rollouts", f"/r/{token}/v1/rollouts"):
        assert (await gw.agent.post(path, json={"policy": "latest"})).status_code in (401, 404, 405)
    sneaky = await gw.agent.post(
        f"/r/{token}/v1/chat/completions",
        json={
            "model": "policy-v1",
            "policy": "latest",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"policy": "policy-v1"},
        },
        headers={"x-harnessrl-policy": "policy-v1"},
    )
    if sneaky.status_code == 200:
        call = (await gw.http.get("/api/calls", params={"limit": 1000})).json()["data"][-1]
        assert call["policy_version"] == 0
    assert (await agent_chat(gw, token, "policy-v1"))["policy_version"] == 0
    rollouts = (await gw.http.get("/api/rollouts", params={"run": "eval"})).json()["data"]
    assert [(r["id"], r["pinned_version"]) for r in rollouts] == [(rollout["id"], 0)]

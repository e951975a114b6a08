"""Hot-swapping adapters: new names per version, current for new rollouts, old ones unloaded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.builders import gateway_settings
from tests.gateway_harness import GatewayHarness, start_gateway

ADMIN = {"x-admin-key": "k"}


@pytest.fixture
async def admin_gateway(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key="k", max_staleness=1)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def chat(gateway, token: str) -> dict:
    response = await gateway.http.post(
        f"/r/{token}/v1/chat/completions", json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def publish(gateway, version: int) -> dict:
    response = await gateway.http.post(
        "/admin/adapters", headers=ADMIN, json={"version": version, "path": f"/adapters/v{version}"}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def last_call(gateway, rollout: dict) -> dict:
    return (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"][-1]


async def test_new_rollouts_use_the_new_version_and_running_ones_keep_theirs(admin_gateway):
    gw = admin_gateway
    early = (await gw.http.post("/api/rollouts", json={"run": "r", "task": "t"}, headers=ADMIN)).json()
    await chat(gw, early["token"])
    published = await publish(gw, 1)
    assert published["name"] == "policy-v1" and gw.fake.adapters == {"policy-v1": "/adapters/v1"}
    late = (await gw.http.post("/api/rollouts", json={"run": "r", "task": "t"}, headers=ADMIN)).json()
    await chat(gw, late["token"])
    await chat(gw, early["token"])
    assert (await last_call(gw, late))["policy_version"] == 1
    assert (await last_call(gw, late))["engine_model"] == "policy-v1"
    assert (await last_call(gw, early))["policy_version"] == 0  # in flight: keeps its version
    assert gw.fake.requests[-2]["model"] == "policy-v1" and gw.fake.requests[-1]["model"] == "fake-base"


async def test_versions_beyond_max_staleness_are_unloaded(admin_gateway):
    gw = admin_gateway
    await publish(gw, 1)
    await publish(gw, 2)
    third = await publish(gw, 3)
    assert third["unloaded"] == [1]
    assert set(gw.fake.adapters) == {"policy-v2", "policy-v3"}
    assert (await gw.http.get("/admin/policy")).json()["current_version"] == 3


async def test_versions_must_increase_and_publishing_needs_the_admin_key(admin_gateway):
    gw = admin_gateway
    await publish(gw, 2)
    stale = await gw.http.post("/admin/adapters", headers=ADMIN, json={"version": 2, "path": "/x"})
    assert stale.status_code == 409
    anonymous = await gw.agent.post("/admin/adapters", json={"version": 3, "path": "/x"})
    assert anonymous.status_code == 401


async def test_a_restarted_gateway_serves_the_published_version(sqlite_db, fake_engine, fake_engine_server):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key="k")
    async for gw in start_gateway(settings, fake_engine):
        await publish(gw, 1)
    fake_engine.adapters.clear()  # the engine restarted too and lost its adapters
    async for gw in start_gateway(settings, fake_engine):
        rollout = (await gw.http.post("/api/rollouts", json={"run": "r", "task": "t"}, headers=ADMIN)).json()
        await chat(gw, rollout["token"])
        assert (await last_call(gw, rollout))["policy_version"] == 1
        assert fake_engine.adapters == {"policy-v1": "/adapters/v1"}


async def test_a_teacher_gateway_on_the_same_store_leaves_the_served_versions_loaded(
    sqlite_db, fake_engine, fake_engine_server
):
    """A warm start's teacher gateway shares the store while policies are served: its engine holds no
    adapters, so it must not try to restore them (and, failing, mark them unloaded for every gateway)."""
    settings = gateway_settings(sqlite_db, fake_engine_server.url, admin_key="k")
    async for gw in start_gateway(settings, fake_engine):
        await publish(gw, 1)
        fake_engine.adapters.clear()  # as a teacher's engine: it lists no adapter ...
        fake_engine.load_error = "Not Found"  # ... and loads none
        teacher = gateway_settings(sqlite_db, fake_engine_server.url, admin_key="k", call_source="demonstration")
        async for teacher_gw in start_gateway(teacher, fake_engine):
            rollout = (
                await teacher_gw.http.post("/api/rollouts", json={"run": "t", "task": "t"}, headers=ADMIN)
            ).json()
            await chat(teacher_gw, rollout["token"])
        assert [(a.name, a.loaded) for a in await gw.state.store.adapters.loaded()] == [("policy-v1", True)]
        assert fake_engine.adapters == {}

"""Two gateways on one store, each with its own engine: a version published to one is served by the other
within a second (loaded into its engine, old ones retired), and a rollout's token works on both."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from tests.gateway_harness import GatewayHarness, gateway_on
from tests.waiting import until

FOLLOW_S = 0.1


async def current_version(gateway: GatewayHarness) -> int:
    return (await gateway.http.get("/admin/policy")).json()["current_version"]


async def until_version(gateway: GatewayHarness, version: int) -> None:
    async def serving() -> bool:
        return await current_version(gateway) == version

    await until(serving, f"policy-v{version} served")


async def publish(gateway: GatewayHarness, version: int) -> None:
    response = await gateway.http.post("/admin/adapters", json={"version": version, "path": f"/adapters/v{version}"})
    assert response.status_code == 200, response.text


async def test_a_publish_on_one_gateway_is_followed_by_the_other(sqlite_db):
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(gateway_on(sqlite_db, stack, follow_interval_s=FOLLOW_S, max_staleness=1))
        b = await stack.enter_async_context(gateway_on(sqlite_db, stack, follow_interval_s=FOLLOW_S, max_staleness=1))
        await publish(a, 1)
        await until_version(b, 1)
        assert set(b.fake.adapters) == {"policy-v1"}  # loaded into b's own engine

        for version in (2, 3):
            await publish(a, version)
        await until_version(b, 3)
        assert set(b.fake.adapters) == set(a.fake.adapters) == {"policy-v2", "policy-v3"}  # v1 retired on both

        rollout = await a.new_rollout(run="follow-run")
        answer = await b.http.post(
            f"/r/{rollout['token']}/v1/chat/completions",
            json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert answer.status_code == 200, answer.text
        [call] = (await a.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
        assert (call["engine_model"], call["policy_version"]) == ("policy-v3", 3)


async def test_a_gateway_that_does_not_follow_stays_on_its_version(sqlite_db):
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(gateway_on(sqlite_db, stack, follow_interval_s=FOLLOW_S))
        b = await stack.enter_async_context(gateway_on(sqlite_db, stack, follow_interval_s=0))
        c = await stack.enter_async_context(gateway_on(sqlite_db, stack, follow_interval_s=FOLLOW_S))
        await publish(a, 1)
        await until_version(c, 1)  # a gateway that follows has followed: time enough for b to have
        await asyncio.sleep(10 * FOLLOW_S)  # and several of its intervals more
        assert await current_version(b) == 0 and b.fake.adapters == {}

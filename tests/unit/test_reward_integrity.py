"""Rewards (and their sums) are finite JSON numbers and final, groups take exactly their G rollouts, and
creating a rollout is idempotent."""

from __future__ import annotations

import math

import httpx
import pytest

from contracts.gateway_client import GatewayClient
from harnesses.grading.reward_functions import RewardFunction
from store.rewards import InvalidReward
from store.store import Store
from tests.builders import TEST_ADMIN_KEY

NOT_FINITE = ["Infinity", "-Infinity", "NaN", "1e999"]  # what json.loads turns into inf / nan


async def post_raw(gateway, path: str, text: str) -> httpx.Response:
    """POST a body as written: JSON clients refuse to encode NaN and infinity themselves."""
    return await gateway.http.post(path, content=text.encode(), headers={"content-type": "application/json"})


async def rollout_view(gateway, rollout_id: int) -> dict:
    return (await gateway.http.get(f"/api/rollouts/{rollout_id}")).json()


@pytest.mark.parametrize(
    ("literal", "said"),
    [*((literal, "finite") for literal in NOT_FINITE), *((v, "valid number") for v in ('"1"', "true", '"NaN"'))],
)
async def test_a_reward_that_is_not_a_finite_json_number_is_a_400_and_nothing_is_stored(gateway, literal, said):
    rollout = await gateway.new_rollout()
    path = f"/api/rollouts/{rollout['id']}"

    added = await post_raw(gateway, f"{path}/reward", f'{{"name": "judge", "value": {literal}}}')
    finished = await post_raw(gateway, f"{path}/end", f'{{"status": "finished", "rewards": {{"v": {literal}}}}}')

    for response in (added, finished):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and said in error["message"], error
    view = await rollout_view(gateway, rollout["id"])
    assert view["rewards"] == {} and view["reward"] is None and view["status"] == "running"


async def test_the_store_refuses_rewards_that_are_not_finite_from_any_caller(gateway):
    store: Store = gateway.app.state.gateway.store
    identity = await store.create_rollout("direct", "t")
    with pytest.raises(InvalidReward, match="finite"):
        await store.add_reward(identity.rollout_id, "fn", math.inf)
    with pytest.raises(InvalidReward, match="'verifier'"):
        await store.end_rollout(identity.rollout_id, "finished", rewards={"ok": 1.0, "verifier": math.nan})
    rollout = (await store.get_rollout(identity.rollout_id))[0]
    assert rollout.status == "running" and rollout.rewards == {}


async def test_rewards_whose_total_overflows_are_a_400_naming_them_and_nothing_is_stored(gateway):
    rollout = await gateway.new_rollout()
    path = f"/api/rollouts/{rollout['id']}"
    assert (await gateway.http.post(f"{path}/reward", json={"name": "a", "value": 1.7e308})).status_code == 200

    added = await gateway.http.post(f"{path}/reward", json={"name": "b", "value": 1.7e308})
    finished = await gateway.http.post(f"{path}/end", json={"status": "finished", "rewards": {"c": 1.0, "d": 1.7e308}})

    for response in (added, finished):
        assert response.status_code == 400, response.text
        message = response.json()["error"]["message"]
        assert "'a' = 1.7e+308" in message and "finite" in message, message
    assert "'b'" in added.json()["error"]["message"] and "'d'" in finished.json()["error"]["message"]
    view = await rollout_view(gateway, rollout["id"])
    assert view["rewards"] == {"a": 1.7e308} and view["reward"] == 1.7e308 and view["status"] == "running"


async def test_the_store_refuses_a_component_that_takes_the_total_past_the_largest_float(gateway):
    store: Store = gateway.app.state.gateway.store
    identity = await store.create_rollout("direct", "t")
    with pytest.raises(InvalidReward, match="'verifier' = 1.7e\\+308, 'judge' = 1.7e\\+308"):
        await store.end_rollout(identity.rollout_id, "finished", rewards={"verifier": 1.7e308, "judge": 1.7e308})
    await store.add_reward(identity.rollout_id, "verifier", -1.7e308)
    with pytest.raises(InvalidReward, match="finite"):
        await store.add_reward(identity.rollout_id, "judge", -1.7e308)
    rollout = (await store.get_rollout(identity.rollout_id))[0]
    assert rollout.status == "running" and rollout.rewards == {"verifier": -1.7e308}
    assert rollout.reward == -1.7e308


async def test_a_reward_function_returning_infinity_abstains_instead_of_blocking_the_rollout():
    function = RewardFunction("tests:inf", lambda: float("inf"))
    with pytest.raises(ValueError, match="not a finite number"):  # the runner records a failing function as None
        await function()


async def test_rewards_are_final_once_a_rollout_has_ended(gateway):
    rollout = await gateway.new_rollout()
    path = f"/api/rollouts/{rollout['id']}"
    await gateway.http.post(f"{path}/end", json={"status": "finished", "rewards": {"verifier": 0.0}})

    late = await gateway.http.post(f"{path}/reward", json={"name": "verifier", "value": 1000.0})
    refinish = await gateway.http.post(f"{path}/end", json={"status": "failed", "rewards": {"verifier": 1.0}})

    for response in (late, refinish):
        assert response.status_code == 409 and "already ended as 'finished'" in response.json()["error"]["message"]
    view = await rollout_view(gateway, rollout["id"])
    assert view["rewards"] == {"verifier": 0.0} and view["status"] == "finished"


async def test_a_retried_create_with_the_same_request_id_returns_the_same_rollout(gateway):
    body = {"run": "idem", "task": "t", "group": "g", "group_size": 2, "request_id": "attempt-1"}
    first = await gateway.http.post("/api/rollouts", json=body)
    again = await gateway.http.post("/api/rollouts", json=body)
    by_header = await gateway.http.post(
        "/api/rollouts", json={**body, "request_id": None}, headers={"Idempotency-Key": "attempt-1"}
    )

    assert first.status_code == again.status_code == by_header.status_code == 201
    assert first.json() == again.json() == by_header.json()  # same id, same token
    rollouts = (await gateway.http.get("/api/rollouts", params={"run": "idem"})).json()["data"]
    assert [r["id"] for r in rollouts] == [first.json()["id"]]


async def test_a_request_id_sent_again_with_another_body_is_a_409(gateway):
    body = {"run": "idem", "task": "t", "group": "g", "request_id": "attempt-1"}
    await gateway.http.post("/api/rollouts", json=body)
    other = await gateway.http.post("/api/rollouts", json={**body, "task": "another"})
    assert other.status_code == 409 and other.json()["error"]["param"] == "request_id"
    assert len((await gateway.http.get("/api/rollouts", params={"run": "idem"})).json()["data"]) == 1


class LosesFirstResponse(httpx.AsyncBaseTransport):
    """Delivers every request, but the first response is lost on the way back (a read error)."""

    def __init__(self, inner: httpx.AsyncBaseTransport):
        self.inner, self.lost = inner, False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if not self.lost:
            self.lost = True
            await response.aread()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


async def test_the_runner_client_retrying_a_lost_create_leaves_no_stray_rollout(gateway):
    client = GatewayClient("http://gateway", TEST_ADMIN_KEY)
    await client._http.aclose()
    client._http = httpx.AsyncClient(
        base_url="http://gateway",
        headers={"x-admin-key": TEST_ADMIN_KEY},
        transport=LosesFirstResponse(httpx.ASGITransport(gateway.app)),
    )
    try:
        created = await client.create_rollout("retry", "t", "g", 2, {"index": 0})
    finally:
        await client.close()
    rollouts = (await gateway.http.get("/api/rollouts", params={"run": "retry"})).json()["data"]
    assert [r["id"] for r in rollouts] == [created["id"]]


async def test_a_full_group_takes_no_more_rollouts(gateway):
    for _ in range(2):
        await gateway.new_rollout(run="g2", task="t", group="g", group_size=2)
    extra = await gateway.http.post("/api/rollouts", json={"run": "g2", "task": "t", "group": "g", "group_size": 2})
    resized = await gateway.http.post("/api/rollouts", json={"run": "g2", "task": "t", "group": "g", "group_size": 3})
    for response in (extra, resized):
        assert response.status_code == 409 and response.json()["error"]["param"] == "group"
    assert "already has its 2 rollouts" in extra.json()["error"]["message"]
    assert len((await gateway.http.get("/api/rollouts", params={"run": "g2"})).json()["data"]) == 2


async def test_a_ready_group_takes_no_more_rollouts_and_stays_ready(gateway):
    rollout = await gateway.new_rollout(run="g1", task="t", group="g", group_size=1)
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"v": 1.0}})
    late = await gateway.http.post("/api/rollouts", json={"run": "g1", "task": "t", "group": "g"})
    assert late.status_code == 409 and "already ready" in late.json()["error"]["message"]
    [group] = (await gateway.http.get("/api/groups", params={"run": "g1"})).json()["data"]
    assert group["status"] == "ready" and len(group["rollouts"]) == 1


async def test_a_cancelled_rollout_gives_its_place_in_the_group_to_a_replacement(gateway):
    first, second = [await gateway.new_rollout(run="c", task="t", group="g", group_size=2) for _ in range(2)]
    await gateway.http.post(f"/api/rollouts/{first['id']}/end", json={"status": "cancelled", "error": "interrupted"})
    replacement = await gateway.new_rollout(run="c", task="t", group="g", group_size=2)
    for rollout, reward in ((second, 0.0), (replacement, 1.0)):
        await gateway.http.post(
            f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"v": reward}}
        )
    [group] = (await gateway.http.get("/api/groups", params={"run": "c"})).json()["data"]
    assert group["status"] == "ready"
    assert sorted(r["status"] for r in group["rollouts"]) == ["cancelled", "finished", "finished"]

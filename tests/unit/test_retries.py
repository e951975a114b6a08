"""An SDK retry is recorded as a retry of the first call: the first is tagged and left out of samples."""

from __future__ import annotations

import asyncio
import time

from gateway.request import retries
from tests.builders import chat_body
from tests.waiting import until


async def calls_and_samples(gateway, rollout: dict) -> tuple[list[dict], list[list[int]]]:
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tokens": "false"})).json()["data"]
    samples = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    return calls, [s["call_ids"] for s in samples]


async def test_a_retry_with_the_sdk_header_replaces_the_call_it_retries(gateway):
    rollout = await gateway.new_rollout()
    auth = {"authorization": f"Bearer {rollout['token']}"}
    body = chat_body("Weather in Paris?")
    assert (await gateway.agent.post("/v1/chat/completions", json=body, headers=auth)).status_code == 200
    retry = await gateway.agent.post(
        "/v1/chat/completions", json=body, headers={**auth, "x-stainless-retry-count": "1"}
    )
    assert retry.status_code == 200
    calls, samples = await calls_and_samples(gateway, rollout)
    assert [sorted(c["tags"]) for c in calls] == [["retried", "undelivered"], []]
    assert samples == [[calls[1]["id"]]]  # one turn, the one the agent went on with


async def test_the_same_body_sent_while_the_first_is_in_flight_is_a_retry(gateway):
    gateway.fake.delay_s = 3.0  # the first is still in flight when the second comes, on a busy machine too
    rollout = await gateway.new_rollout()
    auth = {"authorization": f"Bearer {rollout['token']}"}
    body = chat_body("Weather in Paris?", stream=True)

    async def send():
        return await gateway.agent.post("/v1/chat/completions", json=body, headers=auth)

    first = asyncio.create_task(send())
    book = gateway.app.state.gateway.books.retries
    [attempt] = await until(lambda: book._in_flight.get(rollout["id"]), "the first call in flight")
    # as long as an SDK waits before it retries: the gap from the first's start, not a nap
    await until(lambda: time.monotonic() - attempt.started >= retries.MIN_RETRY_GAP_S, "the SDK's retry gap")
    assert (await send()).status_code == 200 and (await first).status_code == 200
    calls, samples = await calls_and_samples(gateway, rollout)
    assert sorted(sorted(c["tags"]) for c in calls) == [[], ["retried", "undelivered"]]
    assert samples == [[next(c["id"] for c in calls if not c["tags"])]]


async def test_parallel_calls_are_turns_of_their_own_same_body_or_not(gateway, monkeypatch):
    # Calls sent together may start further apart than the real gap on a busy machine: widen it.
    monkeypatch.setattr(retries, "MIN_RETRY_GAP_S", 60.0)
    gateway.fake.delay_s = 0.4
    rollout = await gateway.new_rollout()
    auth = {"authorization": f"Bearer {rollout['token']}"}
    replies = await asyncio.gather(
        *[
            gateway.agent.post("/v1/chat/completions", json=chat_body(text), headers=auth)
            for text in ("one", "two", "two")
        ]
    )
    assert [r.status_code for r in replies] == [200, 200, 200]
    calls, _ = await calls_and_samples(gateway, rollout)
    assert [c["tags"] for c in calls] == [[], [], []]

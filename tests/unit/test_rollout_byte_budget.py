"""A rollout's byte budget (``store.stored_bytes``): a call past it is refused in the client's dialect, and
nothing the rollout recorded before is lost."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack

import pytest
from sqlalchemy.engine import make_url

from gateway.recording.pipeline import over_budget
from gateway.recording.streaming import ChatAssembler, StreamedCall
from store.calls import call_row
from store.store import Store
from store.stored_bytes import BudgetSpent, OverBudget, stored_size
from store.writer import CallWriter
from tests.builders import call_record, chat_body, gateway_settings, messages_body
from tests.gateway_harness import GatewayHarness, start_gateway
from tests.unit.test_anthropic_errors import assert_anthropic_error
from tests.unit.test_errors import assert_openai_error

BUDGET = 24 * 1024  # a few calls of the bodies below


@pytest.fixture
async def budgeted(sqlite_db, fake_engine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, rollout_max_stored_bytes=BUDGET)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


def stored_bytes(database_url: str, rollout_id: int) -> int:
    """What the rollout's calls take in the database, summed there."""
    with sqlite3.connect(make_url(database_url).database) as connection:
        (total,) = connection.execute(
            "SELECT coalesce(sum(length(request) + length(response) + length(prompt_ids) + length(output_ids)"
            " + coalesce(length(output_logprobs), 0) + coalesce(length(prompt_roles), 0)), 0)"
            " FROM calls WHERE rollout_id = ?",
            (rollout_id,),
        ).fetchone()
    return total


async def recorded_calls(gateway: GatewayHarness, rollout_id: int) -> int:
    response = await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")
    return len(response.json()["data"])


def new_turn(make: Callable[[str], dict]) -> Callable[[int], dict]:
    """Bodies of ~1 KB, each opening a conversation of its own (a root: stored whole)."""
    return lambda turn: make(f"{turn:03d} " + "a" * 1000)


DIALECTS = {
    "chat": ("/v1/chat/completions", new_turn(chat_body)),
    "messages": ("/v1/messages", new_turn(messages_body)),
}


async def call_until_refused(gateway: GatewayHarness, url: str, body_of: Callable[[int], dict]):
    """Calls until one is refused: how many were answered, and the refusal."""
    for turn in range(100):
        response = await gateway.agent.post(url, json=body_of(turn))
        if response.status_code != 200:
            return turn, response
    raise AssertionError("the budget never ran out")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_call_past_the_rollouts_byte_budget_is_refused_in_its_dialect_keeping_what_was_recorded(
    budgeted, sqlite_db, dialect
):
    rollout = await budgeted.new_rollout()
    path, body_of = DIALECTS[dialect]
    url = f"/r/{rollout['token']}{path}"
    answered, refusal = await call_until_refused(budgeted, url, body_of)
    if dialect == "chat":
        error = assert_openai_error(refusal, 413)
        assert error["code"] == "rollout_budget_exceeded" and error["type"] == "invalid_request_error"
        message = error["message"]
    else:
        message = assert_anthropic_error(refusal, 413, "request_too_large")
    assert "byte budget" in message and "kept" in message
    assert answered >= 2 and await recorded_calls(budgeted, rollout["id"]) == answered
    assert stored_bytes(sqlite_db, rollout["id"]) <= BUDGET
    again = await budgeted.agent.post(url, json=body_of(answered))  # and it stays refused, nothing lost
    assert again.status_code == 413 and await recorded_calls(budgeted, rollout["id"]) == answered
    other = await budgeted.new_rollout()  # another rollout's budget is its own
    assert (await budgeted.agent.post(f"/r/{other['token']}{path}", json=body_of(0))).status_code == 200


async def test_a_rollout_that_spent_its_budget_is_refused_before_the_engine_is_called(budgeted, sqlite_db):
    rollout = await budgeted.new_rollout()
    url = f"/r/{rollout['token']}/v1/chat/completions"
    assert (await budgeted.agent.post(url, json=chat_body())).status_code == 200
    budgeted.state.store.stored_bytes.budget = stored_bytes(sqlite_db, rollout["id"])  # spent to the byte
    engine_calls = len(budgeted.fake.requests)
    stream = await budgeted.agent.post(url, json=chat_body("again", stream=True))
    assert assert_openai_error(stream, 413)["code"] == "rollout_budget_exceeded"
    assert len(budgeted.fake.requests) == engine_calls


async def test_concurrent_calls_never_take_a_rollout_past_its_budget_and_other_rollouts_still_record(sqlite_db):
    record_size = stored_size(call_row(call_record(1), call_record(1).request))
    store = Store.from_url(sqlite_db, rollout_budget=5 * record_size + record_size // 2)
    writer = CallWriter(store)
    writer.start()
    try:
        flooding, quiet = await store.create_rollout("r", "t"), await store.create_rollout("r", "t")
        records = [call_record(flooding.rollout_id) for _ in range(12)] + [call_record(quiet.rollout_id)] * 3
        results = await asyncio.gather(*(writer.record(r) for r in records), return_exceptions=True)
        assert [isinstance(r, int) for r in results[:12]].count(True) == 5
        assert all(isinstance(r, OverBudget) for r in results[:12] if not isinstance(r, int))
        assert all(isinstance(r, int) for r in results[12:])
        assert await store.stored_bytes.check(flooding.rollout_id) is None  # half a call's room left: not spent
    finally:
        await writer.stop()
        await store.close()


async def test_a_restarted_gateway_counts_what_a_rollout_recorded_before(sqlite_db):
    record = call_record(1)
    size = stored_size(call_row(record, record.request))
    before = Store.from_url(sqlite_db, rollout_budget=2 * size)
    try:
        identity = await before.create_rollout("r", "t")
        await before.insert_calls([call_record(identity.rollout_id), call_record(identity.rollout_id)])
    finally:
        await before.close()
    after = Store.from_url(sqlite_db, rollout_budget=2 * size)  # has not seen the rollout: sums its rows
    try:
        with pytest.raises(BudgetSpent, match="byte budget"):
            await after.stored_bytes.check(identity.rollout_id)
        after.stored_bytes.budget = 3 * size
        await after.insert_calls([call_record(identity.rollout_id)])
        with pytest.raises(OverBudget):
            await after.insert_calls([call_record(identity.rollout_id)])
    finally:
        await after.close()


class ClosedStream:
    def close(self) -> None:
        pass


async def test_a_cut_stream_past_the_budget_is_dropped_without_an_error():
    """Its client left and its rollout has no room for it: nothing to record, and no one to tell (the
    delivery would log a traceback for each such call: an agent could fill the log instead)."""

    async def commit(answer: dict, latency_ms: float, tags: list[str]) -> int:
        raise over_budget("past the budget")

    call = StreamedCall(ClosedStream(), commit, ExitStack(), None, ChatAssembler(prompt_ids=[1, 2, 3]))
    await call.undelivered("undelivered")

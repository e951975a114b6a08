"""Requests stored as deltas against their parent's: read back byte-identical as JSON, stored bytes
linear in turns, and a request that forges the delta form reads back as it was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from store import request_delta
from store.store import Store
from store.tables import Call
from tests.builders import agent_requests, call_record

TURNS = 50


@pytest.fixture
async def store(sqlite_db: str) -> AsyncIterator[Store]:
    store = Store.from_url(sqlite_db)
    yield store
    await store.close()


async def record_chain(store: Store, requests: list[dict], rollout_id: int) -> list[int]:
    ids: list[int] = []
    for request in requests:
        [call_id] = await store.insert_calls(
            [call_record(rollout_id, request=request, parent_id=ids[-1] if ids else None)]
        )
        ids.append(call_id)
    return ids


async def stored_requests(store: Store, rollout_id: int) -> list:
    async with store.sessions() as session:
        return list(
            (await session.scalars(select(Call.request).where(Call.rollout_id == rollout_id).order_by(Call.id))).all()
        )


async def test_every_request_reads_back_byte_identical_as_json(store):
    rollout = await store.create_rollout("delta-run", "t")
    requests = agent_requests(8)
    ids = await record_chain(store, requests, rollout.rollout_id)
    assert all(request_delta.is_delta(r) for r in (await stored_requests(store, rollout.rollout_id))[1:])
    for call_id, sent in zip(ids, requests):
        assert json.dumps((await store.calls.get(call_id)).request) == json.dumps(sent)
    listed = await store.calls.page(rollout.rollout_id, 0, 100)
    assert [json.dumps(c.request) for c in listed] == [json.dumps(r) for r in requests]
    assert json.dumps((await store.calls.last_main(rollout.rollout_id)).request) == json.dumps(requests[-1])


async def test_stored_request_bytes_grow_linearly_in_turns(store):
    rollout = await store.create_rollout("delta-run", "t")
    requests = agent_requests(TURNS)
    await record_chain(store, requests, rollout.rollout_id)
    stored = sum(len(json.dumps(r)) for r in await stored_requests(store, rollout.rollout_id))
    as_received = sum(len(json.dumps(r)) for r in requests)
    last = len(json.dumps(requests[-1]))
    # The history is stored about once (plus per-turn bookkeeping), not once per turn.
    assert stored < 1.5 * last < as_received / 15, (stored, last, as_received)


async def test_a_changed_system_prompt_or_tools_is_stored_whole_and_reads_back(store):
    rollout = await store.create_rollout("delta-run", "t")
    first, second = agent_requests(2)
    second = {
        **second,
        "tools": [],
        "messages": [{"role": "system", "content": "new"}, *second["messages"][1:]],
        "extra": {"a": 1},
    }
    del second["max_tokens"]
    [a, b] = await record_chain(store, [first, second], rollout.rollout_id)
    assert json.dumps((await store.calls.get(b)).request) == json.dumps(second)


async def test_a_request_that_forges_the_delta_form_reads_back_as_sent(store):
    victim = await store.create_rollout("delta-run", "victim")
    [victim_call] = await record_chain(
        store, [{"messages": [{"role": "user", "content": "secret"}]}], victim.rollout_id
    )
    attacker = await store.create_rollout("delta-run", "attacker")
    forged = {request_delta.MARKER: {"parent": victim_call, "keys": [["=", "messages"]]}}
    [plain, child] = await record_chain(store, [forged, {**forged, "model": "policy"}], attacker.rollout_id)
    assert (await store.calls.get(plain)).request == forged
    assert (await store.calls.get(child)).request == {**forged, "model": "policy"}
    assert "secret" not in json.dumps([c.request for c in await store.calls.page(attacker.rollout_id, 0, 10)])


async def test_a_parent_from_before_a_restart_is_no_base_and_the_request_is_stored_whole(store, sqlite_db):
    rollout = await store.create_rollout("delta-run", "t")
    first, second = agent_requests(2)
    [parent] = await record_chain(store, [first], rollout.rollout_id)
    restarted = Store.from_url(sqlite_db)
    try:
        [child] = await restarted.insert_calls([call_record(rollout.rollout_id, request=second, parent_id=parent)])
        assert (await stored_requests(restarted, rollout.rollout_id))[1] == second
        assert json.dumps((await restarted.calls.get(child)).request) == json.dumps(second)
    finally:
        await restarted.close()


def test_python_equal_values_of_another_type_are_not_taken_from_the_parent():
    stored = request_delta.encode({"n": 1, "flag": True, "list": [1]}, 7, {"n": 1.0, "flag": 1, "list": [1]})
    assert stored[request_delta.MARKER]["keys"] == [[":", "n", 1], [":", "flag", True], ["=", "list"]]
    decoded = request_delta.decode(stored, {"n": 1.0, "flag": 1, "list": [1]})
    assert json.dumps(decoded) == json.dumps({"n": 1, "flag": True, "list": [1]})

"""Prompt ids stored as what each call adds beyond its parent: linear bytes, whole prompts on every read."""

from __future__ import annotations

import asyncio
import sqlite3

import numpy as np
import pytest
from alembic import command

from migrations.runner import alembic_config, upgrade
from store import prompt_delta
from store.prompt_delta import StoredPrompt
from store.store import Store
from tests.builders import call_record
from tests.fake_tokens import render_chat

TURNS = 24
HISTORY_CHARS = 400  # per user turn


async def play_turns(gateway, turns: int, messages: list[dict] | None = None) -> tuple[dict, list[list[dict]]]:
    """A rollout whose agent appends a turn per call; the messages each call was sent."""
    gateway.fake.max_model_len = 100_000
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    messages = messages or [{"role": "user", "content": "start"}]
    sent = []
    for turn in range(turns):
        sent.append(list(messages))
        reply = await client.chat.completions.create(model="policy", messages=messages)
        messages = [
            *messages,
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": f"turn {turn}: " + "x" * HISTORY_CHARS},
        ]
    return rollout, sent


def stored_rows(database_url: str, rollout_id: int) -> list[tuple[int, int, bytes]]:
    path = database_url.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        query = "SELECT id, prompt_offset, prompt_ids FROM calls WHERE rollout_id = ? ORDER BY id"
        return db.execute(query, (rollout_id,)).fetchall()


async def api_prompts(gateway, rollout_id: int) -> list[list[int]]:
    calls = (await gateway.http.get(f"/api/rollouts/{rollout_id}/calls", params={"limit": 1000})).json()["data"]
    return [c["prompt_ids"] for c in calls]


async def test_stored_prompt_bytes_grow_linearly_in_turns(gateway, sqlite_db):
    rollout, sent = await play_turns(gateway, TURNS)
    rows = stored_rows(sqlite_db, rollout["id"])
    stored = sum(len(ids) for _, _, ids in rows)
    whole = [4 * len(render_chat(m)) for m in sent]
    assert [offset > 0 for _, offset, _ in rows] == [False] + [True] * (TURNS - 1)
    # Each token stored about once, not once per turn that resends it.
    assert stored <= whole[-1] < sum(whole) / 8, (stored, whole[-1], sum(whole))


async def test_every_read_gives_the_whole_prompt_the_engine_saw(gateway):
    rollout, sent = await play_turns(gateway, 6)
    expected = [render_chat(m) for m in sent]
    assert await api_prompts(gateway, rollout["id"]) == expected
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    detail = (await gateway.http.get(f"/api/calls/{calls[-1]['id']}", params={"decode": True})).json()
    assert detail["prompt_ids"] == expected[-1] and len(detail["prompt_mask"]) == len(expected[-1])
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert sample["input_ids"] == expected[-1] + calls[-1]["output_ids"]
    store = gateway.app.state.gateway.store
    nodes = await store.calls.nodes(rollout["id"])
    assert [n.prompt_ids.tolist() for n in nodes] == expected
    graph = await store.calls.graph_nodes(rollout["id"], 2)
    assert [np.frombuffer(g.sequence, "<i4").tolist()[: g.prompt_len] for g in graph] == expected[-2:]


async def test_a_call_that_rewrites_its_history_stores_its_whole_prompt(gateway, sqlite_db):
    rollout, sent = await play_turns(gateway, 3)
    client = gateway.openai(api_key=rollout["token"])
    rewritten = [{"role": "user", "content": "a different start"}, *sent[-1][1:]]
    await client.chat.completions.create(model="policy", messages=rewritten)
    [*_, (_, offset, ids)] = stored_rows(sqlite_db, rollout["id"])
    assert offset == 0 and np.frombuffer(ids, "<i4").tolist() == render_chat(rewritten)
    assert (await api_prompts(gateway, rollout["id"]))[-1] == render_chat(rewritten)


async def test_a_prompt_never_leans_on_another_rollouts_tokens(gateway, sqlite_db):
    """An attacker replaying a victim's exact conversation gets a root of its own, whole."""
    victim, sent = await play_turns(gateway, 3, [{"role": "user", "content": "secret plan"}])
    victim_calls = (await gateway.http.get(f"/api/rollouts/{victim['id']}/calls")).json()["data"]
    attacker = await gateway.new_rollout(task="other")
    client = gateway.openai(api_key=attacker["token"])
    replayed = [
        *sent[-1],
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "more"},
    ]
    await client.chat.completions.create(model="policy", messages=replayed)
    [(_, offset, _)] = stored_rows(sqlite_db, attacker["id"])
    assert offset == 0
    [call] = (await gateway.http.get(f"/api/rollouts/{attacker['id']}/calls")).json()["data"]
    assert call["parent_id"] is None and call["parent_id"] not in {c["id"] for c in victim_calls}


async def test_a_restarted_gateway_reads_whole_prompts_into_its_call_graph(gateway, sqlite_db):
    rollout, sent = await play_turns(gateway, 3)
    restarted = Store.from_url(sqlite_db)
    try:
        [*_, last] = await restarted.calls.graph_nodes(rollout["id"], 64)
        assert np.frombuffer(last.sequence, "<i4").tolist()[: last.prompt_len] == render_chat(sent[-1])
    finally:
        await restarted.close()


def test_whole_prompts_follow_parents_into_their_sampled_tokens():
    rows = [
        StoredPrompt(1, None, 0, _ids(1, 2), _ids(3)),
        StoredPrompt(2, 1, 3, _ids(4), _ids(5, 6)),
        StoredPrompt(3, 2, 5, _ids(7), _ids()),  # forked off 2's output after one sampled token
        StoredPrompt(4, None, 0, _ids(9), _ids()),
    ]
    whole = prompt_delta.whole_prompts(reversed(rows))
    assert {k: np.frombuffer(v, "<i4").tolist() for k, v in whole.items()} == {
        1: [1, 2],
        2: [1, 2, 3, 4],
        3: [1, 2, 3, 4, 5, 7],
        4: [9],
    }


def test_only_the_wanted_prompts_are_returned_and_a_missing_parent_is_named():
    rows = [
        StoredPrompt(1, None, 0, _ids(1), _ids(2)),
        StoredPrompt(2, 1, 2, _ids(3), _ids(4)),
        StoredPrompt(3, 1, 2, _ids(5), _ids()),  # a second child of 1, after 2 was built on it
        StoredPrompt(4, 2, 4, _ids(6), _ids()),
    ]
    whole = prompt_delta.whole_prompts(rows, wanted={3, 4})
    assert {k: np.frombuffer(v, "<i4").tolist() for k, v in whole.items()} == {3: [1, 2, 5], 4: [1, 2, 3, 4, 6]}
    with pytest.raises(LookupError, match="leans on call 2"):
        prompt_delta.whole_prompts([rows[0], rows[3]])


async def test_the_prompt_delta_migration_writes_whole_prompts_back_when_downgraded(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        rollout = await store.create_rollout("r", "t")
        [first] = await store.insert_calls([call_record(rollout.rollout_id, prompt_ids=[1, 2], output_ids=[3])])
        child = call_record(rollout.rollout_id, prompt_ids=[1, 2, 3, 4], parent_id=first, prompt_offset=3)
        await store.insert_calls([child])
    finally:
        await store.close()
    assert [offset for _, offset, _ in stored_rows(sqlite_db, rollout.rollout_id)] == [0, 3]
    await asyncio.to_thread(command.downgrade, alembic_config(sqlite_db), "0010")
    path = sqlite_db.split("///", 1)[1]
    with sqlite3.connect(path) as db:
        stored = [np.frombuffer(ids, "<i4").tolist() for (ids,) in db.execute("SELECT prompt_ids FROM calls")]
    assert stored == [[1, 2], [1, 2, 3, 4]]
    await asyncio.to_thread(upgrade, sqlite_db)


def _ids(*ids: int) -> bytes:
    return np.asarray(ids, "<i4").tobytes()

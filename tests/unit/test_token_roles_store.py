"""Token roles in the store (``store.roles``): stored as deltas beside the prompt ids, read back whole by
every reader, unknown (None) wherever a call along the chain has none, and counted in the byte budget."""

from __future__ import annotations

import sqlite3

import numpy as np
from sqlalchemy.engine import make_url

from store import prompt_delta
from store.calls import call_row
from store.listings import CallFilter
from store.prompt_delta import StoredPrompt
from store.records import TokenRole
from store.roles import role_runs, roles_from_runs, stored_roles
from store.samples import CallNode, build_samples
from store.store import Store
from store.stored_bytes import stored_size
from tests.builders import call_record
from tests.token_roles import A, S, T, U, record_chain, roles


def stored_role_bytes(database_url: str, rollout_id: int) -> list[bytes | None]:
    with sqlite3.connect(make_url(database_url).database) as connection:
        rows = connection.execute("SELECT prompt_roles FROM calls WHERE rollout_id = ? ORDER BY id", (rollout_id,))
        return [None if r is None else bytes(r) for (r,) in rows]


def _ids(*ids: int) -> bytes:
    return np.asarray(ids, "<i4").tobytes()


async def test_roles_are_stored_as_deltas_and_read_back_whole_across_a_parent_child_chain(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        chain = await record_chain(store)
        # each call stores only the roles of the prompt tokens it stores (past its offset)
        offsets = [0, 7, 12]
        assert stored_role_bytes(sqlite_db, chain.rollout_id) == [
            whole[offset:] for whole, offset in zip(chain.whole_roles, offsets)
        ]
        nodes = await store.calls.nodes(chain.rollout_id)
        assert [bytes(n.prompt_roles) for n in nodes] == list(chain.whole_roles)
        assert all(len(n.prompt_roles) == len(n.prompt_ids) for n in nodes)
        for call_id, whole in zip(chain.call_ids, chain.whole_roles):
            call = await store.calls.get(call_id)
            assert roles_from_runs(call.prompt_roles, len(call.prompt_ids)).tobytes() == whole
        listed = await store.listings.calls(CallFilter(rollout_id=chain.rollout_id), 0, 10, tokens=True)
        assert [roles_from_runs(c.prompt_roles, len(c.prompt_ids)).tobytes() for c in listed] == list(chain.whole_roles)
        [bare] = await store.listings.calls(CallFilter(rollout_id=chain.rollout_id), 0, 1, tokens=False)
        assert bare.prompt_roles == [] and bare.prompt_ids == []  # not read, like the ids
        [page_last] = (await store.calls.page(chain.rollout_id, chain.call_ids[1], 10))[-1:]
        assert roles_from_runs(page_last.prompt_roles, len(page_last.prompt_ids)).tobytes() == chain.whole_roles[2]
    finally:
        await store.close()


async def test_a_call_without_roles_makes_the_roles_of_every_call_leaning_on_it_unknown(sqlite_db):
    store = Store.from_url(sqlite_db)
    try:
        chain = await record_chain(store, known=(True, False, True))
        assert chain.whole_roles[1:] == (None, None)
        nodes = await store.calls.nodes(chain.rollout_id)
        assert [None if n.prompt_roles is None else bytes(n.prompt_roles) for n in nodes] == list(chain.whole_roles)
        assert (await store.calls.get(chain.call_ids[2])).prompt_roles is None
        [sample] = build_samples(nodes)
        assert sample.roles is None  # the leaf's roles are unknown: the sample's too, never a guess
        root_unknown = await record_chain(store, known=(False, True, True), run="roles-2")
        assert [n.prompt_roles for n in await store.calls.nodes(root_unknown.rollout_id)] == [None, None, None]
    finally:
        await store.close()


def test_whole_roles_follow_parents_and_mark_their_outputs_assistant():
    rows = [
        StoredPrompt(1, None, 0, _ids(1, 2), _ids(3), roles((S, 1), (U, 1))),
        StoredPrompt(2, 1, 3, _ids(4), _ids(5, 6), roles((T, 1))),
        StoredPrompt(3, 2, 5, _ids(7), _ids(), roles((U, 1))),  # forked off 2's output after one sampled token
        StoredPrompt(4, 1, 3, _ids(8), _ids(), None),  # a second child of 1, its roles unknown
        StoredPrompt(5, None, 0, _ids(9), _ids(), roles((U, 1))),
    ]
    whole = prompt_delta.whole_roles(reversed(rows))
    assert {k: None if v is None else list(v) for k, v in whole.items()} == {
        1: [S, U],
        2: [S, U, A, T],
        3: [S, U, A, T, A, U],
        4: None,
        5: [U],
    }
    assert set(prompt_delta.whole_roles(rows, wanted={3})) == {3}


def test_sample_roles_align_with_input_ids_and_every_sampled_token_is_assistant():
    def node(call_id, parent, prompt, output, prompt_roles):
        return CallNode(
            call_id,
            parent,
            np.asarray(prompt, np.int32),
            np.asarray(output, np.int32),
            np.zeros(len(output), np.float32),
            0,
            (),
            None if prompt_roles is None else np.frombuffer(prompt_roles, np.uint8),
        )

    first = node(1, None, [1, 2], [3], roles((S, 1), (U, 1)))
    second = node(2, 1, [1, 2, 3, 4, 5], [6, 7], roles((S, 1), (U, 1), (A, 1), (T, 2)))
    [sample] = build_samples([first, second])
    assert sample.roles.dtype == np.int8 and len(sample.roles) == len(sample.input_ids)
    assert sample.roles.tolist() == [S, U, A, T, T, A, A]
    assert (sample.roles[sample.loss_mask == 1] == TokenRole.ASSISTANT).all()
    [unknown] = build_samples([first, node(2, 1, [1, 2, 3, 4, 5], [6, 7], None)])
    assert unknown.roles is None
    [short] = build_samples([node(1, None, [1, 2], [3], roles((U, 1)))])  # not one role per token
    assert short.roles is None


def test_role_runs_are_compact_and_read_back():
    whole = roles((S, 3), (U, 2), (T, 4), (A, 1))
    runs = role_runs(whole)
    assert runs == [("system", 0, 3), ("user", 3, 5), ("tool", 5, 9), ("assistant", 9, 10)]
    assert roles_from_runs(runs, 10).tobytes() == whole
    assert role_runs(None) is None and role_runs(b"") == []
    assert role_runs(bytes([9])) == [("unknown", 0, 1)]  # a value that names no role
    assert roles_from_runs([("tool", 0, 2)], 3) is None and roles_from_runs([("nope", 0, 1)], 1) is None


def test_roles_that_do_not_cover_the_prompt_are_stored_unknown():
    assert stored_roles(roles((U, 2)), 3, 0) is None
    assert stored_roles(roles((U, 2), (T, 1)), 3, 2) == bytes([T])
    assert stored_roles(None, 3, 0) is None


async def test_the_byte_budget_counts_the_stored_roles(sqlite_db):
    record = call_record(1, prompt_ids=list(range(100)), prompt_roles=roles((U, 100)))
    without = call_record(1, prompt_ids=list(range(100)))
    assert stored_size(call_row(record, record.request)) == stored_size(call_row(without, without.request)) + 100
    store = Store.from_url(sqlite_db)
    try:
        chain = await record_chain(store)
        stored_roles_total = sum(len(r) for r in stored_role_bytes(sqlite_db, chain.rollout_id))
        assert stored_roles_total == 5 + 4 + 1  # each call's own tokens only
        counted = Store.from_url(sqlite_db)  # a restarted gateway sums the rows in SQL
        try:
            counted.stored_bytes.budget = 1 << 30
            summed = await counted.stored_bytes._count(chain.rollout_id)
        finally:
            await counted.close()
        store.stored_bytes.budget = 1 << 30
        store.stored_bytes._used.clear()
        assert summed == await store.stored_bytes._count(chain.rollout_id)
        with sqlite3.connect(make_url(sqlite_db).database) as connection:
            (without_roles,) = connection.execute(
                "SELECT sum(length(CAST(request AS BLOB)) + length(CAST(response AS BLOB)) + length(prompt_ids)"
                " + length(output_ids) + coalesce(length(output_logprobs), 0)) FROM calls WHERE rollout_id = ?",
                (chain.rollout_id,),
            ).fetchone()
        assert summed == without_roles + stored_roles_total
    finally:
        await store.close()

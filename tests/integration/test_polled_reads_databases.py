"""What a gateway reads again and again sees another gateway's writes, on SQLite (read inline,
``store.inline_reads``) and on PostgreSQL (through a Core connection): a rollout another gateway ended
(``store.rollout_status``) and the policy versions another gateway loaded (the follower's poll,
``store.adapters``), and the bytes a rollout's calls take, summed from the rows another gateway wrote
(``store.stored_bytes``: a restarted gateway counts them against the rollout's budget)."""

from __future__ import annotations

import asyncio

import pytest

from store import rollout_status
from store.calls import call_row
from store.store import Store
from store.stored_bytes import BudgetSpent, stored_size
from tests.builders import call_record


async def test_an_end_another_store_wrote_is_read_on_both_databases(database_url, monkeypatch):
    monkeypatch.setattr(rollout_status, "RUNNING_RECHECK_S", 0.0)  # every call reads again
    here, other = Store.from_url(database_url), Store.from_url(database_url)
    try:
        identity = await here.create_rollout("status", "t")
        ran = await asyncio.gather(*(here.rollout_ended(identity.rollout_id) for _ in range(8)))
        assert ran == [None] * 8
        await other.end_rollout(identity.rollout_id, "finished", None)
        assert await here.rollout_ended(identity.rollout_id) == "finished"
        assert await here.rollout_ended(10**9) is None  # no such rollout: nothing to refuse it for
    finally:
        await here.close()
        await other.close()


async def test_versions_another_store_loaded_are_polled_on_both_databases(database_url):
    here, other = Store.from_url(database_url), Store.from_url(database_url)
    try:
        assert await here.adapters.loaded_versions() == set()
        await other.adapters.save("policy", 1, "policy-v1", "/adapters/v1", loaded=True)
        await other.adapters.save("coder", 2, "coder-v2", "/adapters/c2", loaded=True)
        await other.adapters.save("coder", 1, "coder-v1", "/adapters/c1", loaded=False)
        assert await here.adapters.loaded_versions() == {("policy", 1, "policy-v1"), ("coder", 2, "coder-v2")}
        assert [(a.policy, a.version) for a in await here.adapters.loaded()] == [("coder", 2), ("policy", 1)]
    finally:
        await here.close()
        await other.close()


async def test_the_bytes_of_calls_another_store_wrote_are_summed_exactly_on_both_databases(database_url):
    record = call_record(1, request={"model": "policy", "messages": [{"role": "user", "content": "héllo"}]})
    size = stored_size(call_row(record, record.request))
    here, other = Store.from_url(database_url, rollout_budget=2 * size + 1), Store.from_url(database_url)
    try:
        identity = await other.create_rollout("bytes", "t")
        await other.insert_calls([call_record(identity.rollout_id, request=record.request)] * 2)
        await here.stored_bytes.check(identity.rollout_id)  # the rows' sum: a byte of the budget is left
        here.stored_bytes.budget = 2 * size
        with pytest.raises(BudgetSpent):
            await here.stored_bytes.check(identity.rollout_id)
    finally:
        await here.close()
        await other.close()

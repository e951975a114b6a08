"""What a gateway reads again and again sees another gateway's writes, on SQLite (read inline,
``store.inline_reads``) and on PostgreSQL (through a Core connection): a rollout another gateway ended
(``store.rollout_status``) and the policy versions another gateway loaded (the follower's poll,
``store.adapters``)."""

from __future__ import annotations

import asyncio

from store import rollout_status
from store.store import Store


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

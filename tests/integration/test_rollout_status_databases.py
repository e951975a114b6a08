"""A rollout another gateway ended is refused here once its status is read again, on SQLite (read inline)
and on PostgreSQL (read through a Core connection): ``store.rollout_status``."""

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

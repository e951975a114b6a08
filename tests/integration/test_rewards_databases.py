"""Migration 0006 on SQLite and PostgreSQL: idempotent creation and full groups under concurrent requests,
refused rewards, the sampling recorded per call, quarantined groups."""

from __future__ import annotations

import asyncio
import math

import pytest

from learner.groups import load_group, run_temperature
from store.rewards import GroupClosed, InvalidReward
from store.store import Store
from tests.builders import call_record


async def test_rollout_creation_rewards_and_quarantine_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:
        # The same request id, twice at once: one rollout.
        same = await asyncio.gather(
            *[
                store.create_rollout(
                    "db", "t", "g", {"i": 0}, group_size=2, sampling={"temperature": 0.8}, request_id="req-0"
                )
                for _ in range(2)
            ]
        )
        assert same[0] == same[1]
        # Three requests race for the group's one free place: one gets it.
        racing = await asyncio.gather(
            *[store.create_rollout("db", "t", "g", {"i": n}, group_size=2, request_id=f"req-{n}") for n in (1, 2, 3)],
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in racing) == ["GroupClosed", "GroupClosed", "RolloutIdentity"]
        [second] = [r for r in racing if not isinstance(r, Exception)]
        with pytest.raises(GroupClosed):
            await store.create_rollout("db", "t", "g", {}, group_size=2)

        await store.insert_calls([call_record(same[0].rollout_id, temperature=0.8, top_p=1.0)])
        with pytest.raises(InvalidReward):
            await store.end_rollout(same[0].rollout_id, "finished", rewards={"v": math.inf})
        await store.end_rollout(same[0].rollout_id, "finished", rewards={"v": 1.0})
        await store.end_rollout(second.rollout_id, "finished", rewards={"v": 0.0})

        run_id = same[0].run_id
        assert await run_temperature(store, run_id) == 0.8
        [group_id] = await store.training.ready_group_ids(run_id, 10)
        assert (await load_group(store, group_id)).temperatures == (0.8,)
        assert await store.training.quarantine_group(run_id, group_id, "a reason")
        assert await store.training.ready_group_ids(run_id, 10) == []
        group, _, _ = await store.listings.group(group_id)
        assert (group.status, group.error) == ("quarantined", "a reason")
    finally:
        await store.close()

"""Migration 0006 on SQLite and PostgreSQL: idempotent creation and full groups under concurrent requests,
refused rewards, the sampling recorded per call, quarantined groups; a request id two requests race for."""

from __future__ import annotations

import asyncio
import math

import pytest
from sqlalchemy import text

from learner.groups import load_group, run_temperature
from migrations.runner import upgrade
from store.listings import GroupFilter
from store.rewards import GroupClosed, InvalidReward
from store.rollout_asks import AskedSettings
from store.rollout_requests import RequestConflict
from store.store import Store
from tests.builders import call_record
from tests.waiting import until


async def test_rollout_creation_rewards_and_quarantine_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:
        # The same request id, twice at once: one rollout.
        sampled = AskedSettings(sampling={"temperature": 0.8})
        same = await asyncio.gather(
            *[
                store.create_rollout("db", "t", "g", {"i": 0}, group_size=2, request_id="req-0", settings=sampled)
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


async def lock_waiters(store: Store) -> int:
    async with store.engine.connect() as connection:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return await connection.scalar(text(query))


async def test_a_request_id_taken_while_another_request_waits_is_a_409_that_adds_nothing_on_postgres(postgres):
    url = postgres.create_database("request_id_race")
    upgrade(url)
    store = Store.from_url(url)
    try:
        await store.create_rollout("r", "t", "g")  # the run exists
        async with store.engine.connect() as connection:
            outer = await connection.begin()
            # The first request's create, its transaction open (its locks held) until ``outer`` commits.
            await Store(store.engine, bind=connection).create_rollout("r", "t1", "g1", request_id="x")
            second = asyncio.ensure_future(store.create_rollout("r", "t2", "g2", request_id="x"))
            await until(lambda: lock_waiters(store), "the second request to wait for the first's locks")
            await outer.commit()
            with pytest.raises(RequestConflict, match="another body"):
                await second
        groups = await store.listings.groups(GroupFilter(run="r"), 0, 10)
        assert [(task, group.name) for group, _, task in groups] == [("t", "g"), ("t1", "g1")]
    finally:
        await store.close()

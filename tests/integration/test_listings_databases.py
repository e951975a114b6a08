"""The viewer's store queries on SQLite and PostgreSQL: JSON filters, summaries, the ancestor CTE, migration 0005."""

from __future__ import annotations

import asyncio
import json

import numpy as np
from sqlalchemy import inspect

from migrations.runner import alembic_config
from store.listings import CallFilter, GroupFilter, RolloutFilter
from store.samples import prompt_marks, prompt_mask
from store.store import Store
from tests.builders import agent_requests, call_record

VIEWER_INDEXES = {"ix_calls_rollout_stats", "ix_calls_finish_reason"}  # migration 0005's


async def test_filters_summary_and_ancestors_agree_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:
        a = await store.create_rollout("db-run", "t1", "g", {"harness": "pi"}, group_size=2)
        b = await store.create_rollout("db-run", "t1", "g", {"harness": "opencode"}, group_size=2)
        [first] = await store.insert_calls(
            [
                call_record(
                    a.rollout_id, prompt_ids=[1, 2], output_ids=[3, 4], output_logprobs=[-1.0, -1.0], policy_version=1
                )
            ]
        )
        [second] = await store.insert_calls(
            [
                call_record(
                    a.rollout_id,
                    prompt_ids=[1, 2, 3, 4, 5],
                    output_ids=[6],
                    output_logprobs=[-1.0],
                    parent_id=first,
                    policy_version=2,
                )
            ]
        )
        await store.insert_calls(
            [call_record(b.rollout_id, tags=["title"], finish_reason="length", fork_of=first, drift_tokens=2)]
        )
        await store.end_rollout(a.rollout_id, "finished", rewards={"v": 1.0})
        await store.end_rollout(b.rollout_id, "finished", rewards={"v": 0.0})

        listings = store.listings
        assert [r.id for r, *_ in await listings.rollouts(RolloutFilter(harness="pi"), 0, 10)] == [a.rollout_id]
        assert [r.id for r, *_ in await listings.rollouts(RolloutFilter(policy_version=2), 0, 10)] == [a.rollout_id]
        assert [r.id for r, *_ in await listings.rollouts(RolloutFilter(reward_max=0.5), 0, 10)] == [b.rollout_id]
        tagged = await listings.calls(CallFilter(run="db-run", tag="title"), 0, 10)
        assert [c.rollout_id for c in tagged] == [b.rollout_id] and tagged[0].tags == ["title"]
        assert [g.status for g, *_ in await listings.groups(GroupFilter(run="db-run"), 0, 10)] == ["ready"]
        assert [r.name for r in await listings.runs("db-", 0, 10)] == ["db-run"]
        await store.create_rollout("db-later", "t1", "g", {})
        newest = await listings.runs(None, 0, 1, newest_first=True)
        assert [r.name for r in newest] == ["db-later"]
        assert [r.name for r in await listings.runs(None, newest[0].id, 1, newest_first=True)] == ["db-run"]
        runs = await listings.runs(None, 0, 10)
        counts = await listings.run_counts([r.id for r in runs])
        assert [(counts[r.id].rollouts, counts[r.id].rollouts_finished, counts[r.id].reward_mean) for r in runs] == [
            (2, 2, 0.5),
            (1, 0, None),
        ]
        assert all(counts[r.id].last_activity is not None for r in runs)

        run = await listings.run("db-run")
        summary = await store.summary.run_summary(run.id)
        assert (summary["calls"], summary["side_calls"], summary["roots"], summary["forks"]) == (3, 1, 2, 1)
        assert summary["reward_by_version"] == [
            {"policy_version": 0, "rollouts": 1, "reward_mean": 0.0},
            {"policy_version": 1, "rollouts": 1, "reward_mean": 1.0},
        ]
        assert summary["prompt_tokens"] == 2 + 5 + 3 and summary["drift_tokens"] == 2

        ancestors = await store.calls.ancestors(second)
        assert [x.call_id for x in ancestors] == [first]
        assert prompt_mask(np.array([1, 2, 3, 4, 5]), ancestors).tolist() == [0, 0, 1, 1, 0]
        marks = prompt_marks(np.array([1, 2, 3, 4, 5]), ancestors)
        assert marks.logprobs.tolist() == [0, 0, -1.0, -1.0, 0] and marks.versions.tolist() == [-1, -1, 1, 1, -1]
    finally:
        await store.close()


async def calls_indexes(database_url: str) -> set[str]:
    store = Store.from_url(database_url)
    try:
        async with store.engine.connect() as connection:
            return await connection.run_sync(lambda sync: {i["name"] for i in inspect(sync).get_indexes("calls")})
    finally:
        await store.close()


async def test_migration_0005_goes_down_and_up_keeping_the_calls(database_url):
    from alembic import command

    store = Store.from_url(database_url)
    try:
        rollout = await store.create_rollout("mig-run", "t1", None)
        [call_id] = await store.insert_calls([call_record(rollout.rollout_id, prompt_ids=[1, 2], output_ids=[3])])
    finally:
        await store.close()
    assert VIEWER_INDEXES <= await calls_indexes(database_url)

    await asyncio.to_thread(command.downgrade, alembic_config(database_url), "0004")
    assert not VIEWER_INDEXES & await calls_indexes(database_url)
    await asyncio.to_thread(command.upgrade, alembic_config(database_url), "head")
    assert VIEWER_INDEXES <= await calls_indexes(database_url)

    store = Store.from_url(database_url)
    try:
        call = await store.calls.get(call_id)
        assert call is not None and call.rollout_id == rollout.rollout_id and call.num_prompt_tokens == 2
    finally:
        await store.close()


async def test_requests_and_prompts_stored_as_deltas_read_back_whole(database_url):
    store = Store.from_url(database_url)
    try:
        rollout = await store.create_rollout("delta-db", "t1", None)
        requests = agent_requests(6)
        ids: list[int] = []
        prompts, prompt, output = [], [], []
        for turn, request in enumerate(requests):
            offset = len(prompt) + len(output) if ids else 0
            prompt = [*prompt, *output, 1000 + turn, 2000 + turn]
            output = [3000 + turn]
            prompts.append(prompt)
            record = call_record(
                rollout.rollout_id,
                request=request,
                prompt_ids=prompt,
                output_ids=output,
                output_logprobs=[-0.5],
                parent_id=ids[-1] if ids else None,
                prompt_offset=offset,
            )
            ids += await store.insert_calls([record])
        for call_id, sent, whole in zip(ids, requests, prompts):
            call = await store.calls.get(call_id)
            assert json.dumps(call.request) == json.dumps(sent)
            assert call.prompt_ids == whole
        listed = await store.listings.calls(CallFilter(rollout_id=rollout.rollout_id), 0, 100, tokens=True)
        assert [c.prompt_ids for c in listed] == prompts
        assert [n.prompt_ids.tolist() for n in await store.calls.nodes(rollout.rollout_id)] == prompts
    finally:
        await store.close()

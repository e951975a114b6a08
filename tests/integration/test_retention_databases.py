"""`harnessrl db prune` on SQLite and PostgreSQL (which enforces the foreign keys): ended rollouts go with
their calls; running rollouts and groups the learner has not consumed stay; a run pruned whole goes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update
from typer.testing import CliRunner

from harnessrl.cli.app import app
from store.retention import PruneFilter
from store.store import Store
from store.tables import Call, Group, LearnerStep, Rollout, Run
from tests.builders import agent_requests, call_record


async def played_rollout(
    store: Store, run: str, task: str, status: str = "finished", turns: int = 3, group_size: int = 1
) -> int:
    """A rollout of ``turns`` linked calls (requests stored as deltas), ended with ``status``."""
    rollout = await store.create_rollout(run, task, None, group_size=group_size)
    ids: list[int] = []
    for request in agent_requests(turns, history_chars=50):
        ids += await store.insert_calls(
            [call_record(rollout.rollout_id, request=request, parent_id=ids[-1] if ids else None)]
        )
    if status != "running":
        await store.end_rollout(rollout.rollout_id, status, rewards={"v": 1.0} if status == "finished" else None)
    return rollout.rollout_id


async def count(store: Store, table) -> int:
    async with store.sessions() as session:
        return await session.scalar(select(func.count()).select_from(table))


async def consume_groups(store: Store, run: str) -> None:
    async with store.sessions.begin() as session:
        run_id = await session.scalar(select(Run.id).where(Run.name == run))
        await session.execute(
            update(Group).where(Group.run_id == run_id, Group.status == "ready").values(status="consumed")
        )


async def test_prune_deletes_ended_rollouts_and_keeps_what_the_learner_needs(database_url):
    store = Store.from_url(database_url)
    try:
        trained = [await played_rollout(store, "old", f"t{k}") for k in range(3)]
        await played_rollout(store, "old", "busy", status="running", group_size=2)
        await consume_groups(store, "old")
        await played_rollout(store, "old", "fresh")  # its group is ready: the learner has not read it
        other = await played_rollout(store, "other", "t0", status="failed")

        dry = await store.retention.prune(PruneFilter(run="old"), dry_run=True)
        assert (dry.rollouts, dry.calls, dry.dry_run) == (3, 9, True)
        assert await count(store, Rollout) == 6  # a dry run deletes nothing

        result = await store.retention.prune(PruneFilter(run="old"))
        assert (result.rollouts, result.calls, result.kept_for_learner) == (3, 9, 1)
        async with store.sessions() as session:
            left = set((await session.scalars(select(Rollout.id))).all())
        assert not left & set(trained) and other in left and len(left) == 3
        assert await count(store, Call) == 3 * 3  # the kept rollouts' calls, all of them
        # the kept rollouts still read back whole (their requests are deltas against their own calls)
        [kept] = await store.calls.page(other, 0, 1)
        assert kept.request == agent_requests(1, history_chars=50)[0]
        assert await store.listings.run_exists("old")  # rollouts of it are left
    finally:
        await store.close()


async def test_a_run_pruned_whole_takes_its_groups_tasks_and_learner_records(database_url):
    store = Store.from_url(database_url)
    try:
        for k in range(2):
            await played_rollout(store, "gone", f"t{k}")
        await consume_groups(store, "gone")
        await store.training.record_step(await store.listings.run_id("gone"), 1, {"loss": 0.5})
        keep = await played_rollout(store, "stays", "t0", status="failed")

        result = await store.retention.prune(PruneFilter(run="gone"))
        assert result.rollouts == 2 and not await store.listings.run_exists("gone")
        assert await count(store, LearnerStep) == 0 and await count(store, Group) == 1
        assert (await store.get_rollout(keep)) is not None
    finally:
        await store.close()


async def test_prune_by_age_and_status_from_the_cli(database_url):
    store = Store.from_url(database_url)
    try:
        old_failed = await played_rollout(store, "r", "a", status="failed")
        await played_rollout(store, "r", "b", status="failed")  # ended just now
        await played_rollout(store, "r", "c", status="cancelled")
        await consume_groups(store, "r")
        async with store.sessions.begin() as session:
            await session.execute(
                update(Rollout)
                .where(Rollout.id == old_failed)
                .values(finished_at=datetime.now(UTC) - timedelta(days=8))
            )
    finally:
        await store.close()

    def invoke(*args):
        return CliRunner().invoke(app, ["db", "prune", *args, "--database-url", database_url])

    result = await asyncio.to_thread(invoke, "--older-than", "7d", "--status", "failed")
    assert result.exit_code == 0 and "deleted 1 rollouts and 3 calls" in result.output, result.output
    store = Store.from_url(database_url)
    try:
        assert await store.get_rollout(old_failed) is None and await count(store, Rollout) == 2
    finally:
        await store.close()
    for args, says in (
        (("--older-than", "a week"), "like 7d or 12h"),
        (("--status", "running"), "never pruned"),
        ((), "say what to prune"),
    ):
        refused = await asyncio.to_thread(invoke, *args)
        assert refused.exit_code == 1 and says in refused.output and "Traceback" not in refused.output, refused.output

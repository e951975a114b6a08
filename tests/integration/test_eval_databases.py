"""The per-policy evaluation counts on SQLite and PostgreSQL (the verifier's component read from JSON)."""

from __future__ import annotations

from store.passk import TaskCount
from store.rollout_asks import PolicyPin
from store.store import Store


async def test_pinned_counts_agree_on_both_databases(database_url):
    store = Store.from_url(database_url)
    try:

        async def ended(version: int | None, task: str, status: str, rewards: dict) -> None:
            identity = await store.create_rollout("eval", task, f"g-{version}", pin=PolicyPin(version))
            await store.end_rollout(identity.rollout_id, status, rewards=rewards)

        await ended(0, "a", "finished", {"verifier": 1.0})
        await ended(0, "a", "finished", {"verifier": 0.0, "api": 1.0})  # total 1, but the verifier says no
        await ended(0, "a", "failed", {})
        await ended(2, "a", "finished", {"verifier": 1.0, "judge": 0.5})
        await ended(2, "b", "finished", {"api": 1.0})  # no verifier component: the total decides
        await ended(2, "b", "cancelled", {})
        await ended(None, "a", "finished", {"verifier": 1.0})
        run_id = await store.listings.run_id("eval")
        assert await store.evaluations.pinned_task_counts(run_id) == [
            TaskCount(0, "a", 3, 1, 1, 2.0, 2.0),
            TaskCount(2, "a", 1, 1, 0, 1.5, 2.25),
            TaskCount(2, "b", 1, 1, 0, 1.0, 1.0),
        ]
    finally:
        await store.close()

"""What the learner left in the store, read the way the report and the dashboard read it."""

from __future__ import annotations

from gateway.store.store import Store
from gateway.store.training import CheckpointRecord, checkpoints, learner_steps


async def stored_steps(store: Store, run: str) -> list[dict]:
    """The run's per-step metrics, in step order (none when the run does not exist)."""
    run_id = await store.run_id(run)
    return [] if run_id is None else [metrics for _, metrics in await learner_steps(store, run_id)]


async def stored_checkpoints(store: Store, run: str) -> list[CheckpointRecord]:
    """The run's committed checkpoints, oldest first (none when the run does not exist)."""
    run_id = await store.run_id(run)
    return [] if run_id is None else await checkpoints(store, run_id)

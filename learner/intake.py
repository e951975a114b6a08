"""The learner's intake: waiting for the run to exist and for enough ready groups, each loaded and
checked; a group that cannot be trained on is quarantined (the learner goes on without it)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from learner.config import LearnerConfig
from learner.groups import ReadyGroup, UnusableGroup, check_group, load_group
from store.policies import run_policy
from store.store import Store

logger = logging.getLogger("learner")


async def trained_policy(store: Store, run: str) -> str:
    """The policy a run trains (``store.policies``): the versions this learner publishes are its."""
    found = await store.listings.run(run)
    return run_policy(found.config if found else None)


async def wait_for_run(store: Store, run: str, poll_s: float, stop: asyncio.Event) -> int | None:
    """The learner may start before the first rollout creates the run: wait for it (None: stopped)."""
    announced = False
    while not stop.is_set():
        run_id = await store.listings.run_id(run)
        if run_id is not None:
            return run_id
        if not announced:
            logger.warning("run %r does not exist yet; waiting for its first rollout", run)
            announced = True
        await sleep_or_stop(stop, poll_s)
    return None


@dataclass(frozen=True)
class GroupCheck:
    temperature: float  # the run's sampling temperature, which the step's log-probs are taken at
    vocab_size: int | None  # the model's embedding rows: larger token ids cannot be trained on


class GroupIntake:
    """The ready groups of one run, ``groups_per_step`` at a time; counts what it quarantined."""

    def __init__(self, store: Store, run_id: int, config: LearnerConfig, check: GroupCheck):
        self.store, self.run_id, self.config, self.check = store, run_id, config, check
        self.quarantined = 0  # since the caller last reset it

    async def next_groups(self, taken: set[int], stop: asyncio.Event) -> list[ReadyGroup] | None:
        """The next step's groups (none of ``taken``), usable all; None once ``stop`` is set."""
        while not stop.is_set():
            if (groups := await self.ready_groups(taken)) is not None:
                return groups
            await sleep_or_stop(stop, self.config.poll_interval_s)
        return None

    async def has_batch(self, taken: set[int]) -> bool:
        """Whether ``groups_per_step`` ready groups (none of ``taken``) are there now; loads nothing."""
        wanted = self.config.batch.groups_per_step
        return len(await self.store.training.ready_group_ids(self.run_id, wanted, taken)) >= wanted

    async def ready_groups(self, taken: set[int]) -> list[ReadyGroup] | None:
        """The next step's groups if enough usable ones are ready now, else None (without waiting)."""
        wanted = self.config.batch.groups_per_step
        while True:
            ids = await self.store.training.ready_group_ids(self.run_id, wanted, taken)
            if len(ids) < wanted:
                return None
            groups = [await self._usable(group_id) for group_id in ids]
            if all(g is not None for g in groups):
                return groups
            # some were quarantined (no longer ready): look for others at once

    async def _usable(self, group_id: int) -> ReadyGroup | None:
        """The group, loaded and checked; None when it is unusable, in which case it is quarantined."""
        try:
            group = await load_group(self.store, group_id, self.config.batch.include_side)
            check_group(
                group, self.check.temperature, self.check.vocab_size, maxrl=self.config.batch.advantage == "maxrl"
            )
            return group
        except UnusableGroup as exc:
            await self.store.training.quarantine_group(self.run_id, group_id, str(exc))
            self.quarantined += 1
            logger.error("group %d quarantined, the learner goes on without it: %s", group_id, exc)
            return None


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass

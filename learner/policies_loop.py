"""One learner for every policy: the base model once, one named LoRA adapter per policy, steps in turn.

The loop, each round:
1. join the runs the source names now whose run exists (a policy added while it runs is picked up:
   a run not made yet is waited for, as a lone learner waits for its run);
2. ask each stepping policy whether a batch is ready (a count, nothing loaded);
3. give the step to the next ready policy after the last one that stepped (learner.turns);
4. that policy takes one step as a lone learner would (learner.loop.take_step on its slot): its
   checkpoint commits with the groups it consumed under its own run, its version is published by its
   own publisher, and only when its weights moved, so adapters that did not step are never published.

A run's settings may come later than its run (``ConfigFor`` returns None until they are there: it is
waited for), and its job may stop it alone (``Hooks.stops``): it keeps its work and the others go on.
Each policy's result is handed over when it ends (``Hooks.on_end``), not only when the learner does.

With ``Hooks.metrics`` (the process's one Prometheus endpoint, served by the caller: learner.loop's
``serve_exporter``), each policy's steps feed series labelled with its name; one that ends keeps its
last values with ``training`` 0 (learner.prometheus).

Under torchrun (``[parallel] shard = "none"``) rank 0 runs this loop and every other rank mirrors each
policy's adapter and steps on its own copy of the base (learner.policy_followers): data parallelism per
step. An FSDP-sharded base is refused beside other policies.

A policy whose step or start raises (a sample the step cannot take, a publication the gateway refuses,
a gateway serving a newer version of it) stops alone and says why; its groups since its last
committed checkpoint stay ready for the next start. The others keep stepping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from learner.adapters import adapter_parameters
from learner.config import LearnerConfig
from learner.distributed import world
from learner.intake import sleep_or_stop
from learner.loop import LearnerError, install_signal_handlers
from learner.metrics import Metrics
from learner.policy_followers import lead_join, refuse_sharded
from learner.policy_slot import PolicySlot, PublisherFor, SlotResult, open_slot
from learner.prometheus import LearnerExporter
from learner.publish import Publisher
from learner.ranks import tell_followers
from learner.trainer import load_base
from learner.turns import Turns
from store.store import Store

logger = logging.getLogger("learner")

RunSource = Callable[[], Awaitable[Sequence[str]]]  # the runs to train now (re-read every round)
# a run's settings, its paths resolved (its own folders); None: not written yet (the run waits for them)
ConfigFor = Callable[[str], LearnerConfig | None]


@dataclass(frozen=True)
class Hooks:
    """What the caller hears and says while policies train (each optional)."""

    on_step: Callable[[str, Metrics], None] | None = None  # (run, its step's metrics)
    stops: Callable[[str], bool] | None = None  # has the job of this run asked its training to stop?
    on_end: Callable[[SlotResult], None] | None = None  # a policy's result, once, as it stops, fails or ends
    metrics: LearnerExporter | None = None  # the process's Prometheus series (the caller serves and closes it)


def fixed_runs(runs: Sequence[str]) -> RunSource:
    """A source naming the same runs throughout."""
    names = tuple(runs)

    async def source() -> Sequence[str]:
        return names

    return source


class Policies:
    """The slots of one learner process and the one model they share (mutable: slots join, step, fail)."""

    def __init__(
        self,
        store: Store,
        configs: ConfigFor,
        publisher_for: PublisherFor | None,
        hooks: Hooks,
    ):
        self.store, self.configs, self.publisher_for, self.hooks = store, configs, publisher_for, hooks
        self.reported: set[str] = set()  # runs whose result on_end was given
        self.slots: dict[str, PolicySlot] = {}
        self.refused: dict[str, SlotResult] = {}  # runs whose slot could not open, with why
        self.turns = Turns()
        self.model: Any = None  # the PeftModel, once the first slot made it
        self.base: tuple[str, str, str] | None = None  # (model_dir, dtype, device) every policy shares
        self.waiting: set[str] = set()

    def finished(self, run: str) -> bool:
        return run in self.refused or (run in self.slots and self.slots[run].done)

    def stepping(self) -> list[PolicySlot]:
        return [slot for slot in self.slots.values() if not slot.done]

    async def join(self, runs: Sequence[str]) -> None:
        """Open a slot for each named run that exists and has none yet."""
        for run in runs:
            if run in self.slots or run in self.refused:
                continue
            run_id = await self.store.listings.run_id(run)
            if run_id is None:
                self._wait(run, "does not exist yet; its policy joins at its first rollout")
                continue
            try:
                config = self.configs(run)
                if config is None:
                    self._wait(run, "has no settings yet; its policy joins once its job wrote them")
                    continue
                self.slots[run] = await self._open(run, run_id, config)
                self.turns.join(run)
                logger.info("[%s] policy %r joined the learner", run, self.slots[run].policy)
            except Exception as exc:  # noqa: BLE001 - one policy's start must not stop the others
                self.refused[run] = SlotResult(run, "", 0, 0, "failed", _said(exc))
                logger.error("[%s] cannot train this run beside the others: %s", run, _said(exc))

    def _wait(self, run: str, why: str) -> None:
        if run not in self.waiting:
            logger.warning("run %r %s", run, why)
            self.waiting.add(run)

    async def honour_stops(self) -> None:
        """Stop each stepping policy whose job asked (it keeps its work); hand over the results of those
        that ended since the last call."""
        for slot in self.stepping():
            if self.hooks.stops is not None and self.hooks.stops(slot.run):
                await slot.stop()
        self.report("stopped")

    def report(self, reason: str, everyone: bool = False) -> None:
        """Hand ``on_end`` the result of each run that ended (``everyone``: the learner ends) and was not
        yet, and mark its policy's series ended."""
        for run, result in self.results(reason).items():
            ended = everyone or run in self.refused or self.slots[run].done
            if ended and run not in self.reported:
                self.reported.add(run)
                if self.hooks.metrics is not None and result.policy:  # a run refused at its start has no series
                    self.hooks.metrics.policy(result.policy).ended(failed=result.error is not None)
                if self.hooks.on_end is not None:
                    self.hooks.on_end(result)

    async def _open(self, run: str, run_id: int, config: LearnerConfig) -> PolicySlot:
        self._check_base(config)
        if self.model is None:
            self.model = await asyncio.to_thread(load_base, config)
        adapter = f"p{len(self.slots) + len(self.refused)}"
        self.model, trainer = await asyncio.to_thread(lead_join, self.model, adapter, config)  # followers mirror it
        publisher, own = self._publisher(run, config)
        slot = await open_slot(self.store, run, run_id, config, trainer, publisher, own)
        clash = next((s.run for s in self.slots.values() if s.policy == slot.policy), None)
        if clash is not None:
            await slot.close()
            raise LearnerError(
                f"run {run!r} trains policy {slot.policy!r}, which this learner already trains for run {clash!r}: "
                f"a policy's versions have one learner; give the run a policy of its own (`harnessrl run --policy NAME`)"
            )
        if self.hooks.metrics is not None:
            slot.sink.exporter = self.hooks.metrics.policy(slot.policy)  # the slot's steps feed its labelled series
        return slot

    def _check_base(self, config: LearnerConfig) -> None:
        refuse_sharded(config, world()[1])
        base = (config.model_dir, config.dtype, config.device)
        if self.base is not None and base != self.base:
            raise LearnerError(
                f"its settings name the base model {base} but this learner holds {self.base}: every policy "
                f"of one learner shares the base model; give them the same model_dir, dtype and device"
            )
        self.base = base

    def _publisher(self, run: str, config: LearnerConfig) -> tuple[Publisher | None, bool]:
        if not config.publish.enabled:
            return None, False
        if self.publisher_for is not None:
            return self.publisher_for(run, config), False
        return Publisher.of(config.publish), True

    async def step(self, slot: PolicySlot) -> Metrics | None:
        """One step of ``slot``; its failure stops it alone (None then, as when nothing was ready)."""
        started = time.perf_counter()
        try:
            metrics = await slot.step(started - slot.learning_since)
        except Exception as exc:  # noqa: BLE001 - isolation: the others keep stepping
            slot.fail(_said(exc))
            for p in adapter_parameters(self.model, slot.learning.trainer.adapter):
                p.grad = None  # a step that raised may leave its gradients behind
            return None
        slot.learning_since = time.perf_counter()
        return metrics

    def results(self, reason: str) -> dict[str, SlotResult]:
        return {**self.refused, **{run: slot.result(reason) for run, slot in self.slots.items()}}


async def run_policies(
    configs: ConfigFor,
    store: Store,
    runs: RunSource,
    *,
    publisher_for: PublisherFor | None = None,
    stop: asyncio.Event | None = None,
    hooks: Hooks = Hooks(),
    poll_interval_s: float = 2.0,
    handle_signals: bool = True,
) -> dict[str, SlotResult]:
    """Train every run ``runs`` names (one policy each) over one base model until each reaches its
    max_steps, fails or is stopped by its job (``hooks.stops``), or ``stop`` is set; each run's result,
    also handed to ``hooks.on_end`` as each ends. ``publisher_for`` overrides the publishers built from the configs
    (tests pass recording ones)."""
    stop = stop or asyncio.Event()
    restore = install_signal_handlers(stop) if handle_signals else (lambda: None)
    policies = Policies(store, configs, publisher_for, hooks)
    try:
        reason = await _rounds(policies, runs, stop, poll_interval_s)
        for slot in policies.slots.values():
            await slot.finish()
        policies.report(reason, everyone=True)
        return policies.results(reason)
    finally:
        tell_followers("stop")  # under torchrun the other ranks end with this one
        restore()
        for slot in policies.slots.values():
            await slot.close()


async def _rounds(
    policies: Policies,
    runs: RunSource,
    stop: asyncio.Event,
    poll_interval_s: float,
) -> str:
    while not stop.is_set():
        names = list(await runs())
        await policies.join(names)
        await policies.honour_stops()
        if names and all(policies.finished(run) for run in names):
            return "max_steps"
        ready = {slot.run for slot in policies.stepping() if await slot.has_batch()}
        pick = policies.turns.next(ready)
        if pick is None:
            await sleep_or_stop(stop, poll_interval_s)
            continue
        slot = policies.slots[pick]
        metrics = await policies.step(slot)
        on_step = policies.hooks.on_step
        if metrics is not None and on_step is not None:
            on_step(slot.run, metrics)
    return "stopped"


def _said(exc: Exception) -> str:
    return str(exc) or type(exc).__name__

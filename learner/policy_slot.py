"""One policy's place in a learner that trains several over one base model.

A slot owns everything of its policy that a lone learner owns (learner.loop): its named adapter in the
shared ``PeftModel`` (learner.adapters), its AdamW state and LR schedule, step count and version,
pending groups, checkpoints (committed with the groups they consumed, under its run), publisher,
metrics sink and intake. Only the base model's weights are shared. Every use of the model by a slot
activates its adapter first, so a slot's step, checkpoint, publication and proof see its adapter alone.
On an accelerator, a slot's optimizer moments wait in host memory between its steps (learner.parking).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from learner.adapters import activate, adapter_parameters, add_adapter, load_adapter
from learner.config import LearnerConfig
from learner.intake import GroupIntake, trained_policy
from learner.loop import checkpoint, open_intake, resume, sync_published, take_step
from learner.metrics import Metrics, MetricsSink
from learner.parking import park, unpark
from learner.progress import Learning, Progress
from learner.publish import Publisher
from learner.ranks import tell_followers
from learner.reference import ReferenceWeights
from learner.served_settings import resolve_max_staleness, resolve_token_budget
from learner.session_advantages import RunningBaselines
from learner.trainer import Trainer, lora_config, optimizer_for
from store.store import Store

logger = logging.getLogger("learner")

PublisherFor = Callable[[str, LearnerConfig], Publisher | None]  # (run, its config) -> its publisher


@dataclass(frozen=True)
class SlotResult:
    """How one policy's training ended."""

    run: str
    policy: str
    step: int  # steps taken in total (a resumed run counts the earlier ones)
    version: int  # the policy version it ended with
    reason: str  # "max_steps", "stopped" or "failed"
    error: str | None = None  # why it failed: the message names the fix


@dataclass
class PolicySlot:
    """A policy's moving parts (mutable on purpose: they move every step it takes)."""

    learning: Learning
    policy: str
    publisher: Publisher | None
    sink: MetricsSink
    progress: Progress
    intake: GroupIntake
    own_publisher: bool
    baselines: RunningBaselines = field(default_factory=RunningBaselines)
    error: str | None = None  # set: the slot failed and takes no more steps
    stopped: bool = False  # its job asked it to stop (learner.policies_loop's ``stops``): it takes no more
    learning_since: float = field(default_factory=time.perf_counter)  # its last step's end: its wait starts

    @property
    def run(self) -> str:
        return self.learning.run

    @property
    def done(self) -> bool:
        limit = self.learning.config.max_steps
        return self.error is not None or self.stopped or bool(limit and self.progress.step >= limit)

    def taken(self) -> set[int]:
        return {g.group_id for g in self.progress.pending}

    async def has_batch(self) -> bool:
        return not self.done and await self.intake.has_batch(self.taken())

    async def step(self, wait_s: float) -> Metrics | None:
        """One step of this policy on its next ready groups (None: they were quarantined meanwhile)."""
        groups = await self.intake.ready_groups(self.taken())
        if groups is None:
            return None
        learning, trainer = self.learning, self.learning.trainer
        activate(trainer.model, trainer.adapter)
        unpark(trainer.optimizer, trainer.model)  # an idle policy's moments wait in host memory (learner.parking)
        try:
            return await take_step(
                learning, self.publisher, self.sink, self.progress, self.intake, self.baselines, groups, wait_s
            )
        finally:
            park(trainer.optimizer, trainer.model)

    async def finish(self) -> None:
        """Keep the work done since the last checkpoint (a graceful stop; a failed slot keeps none)."""
        if self.error is None and self.progress.pending:
            activate(self.learning.trainer.model, self.learning.trainer.adapter)
            await checkpoint(self.learning, self.progress)

    async def stop(self) -> None:
        """Its job asked it to stop: it keeps its work (``finish``) and takes no more steps."""
        await self.finish()
        self.stopped = True
        logger.info("[%s] policy %r stopped at step %d, as its job asked", self.run, self.policy, self.progress.step)

    def fail(self, error: str) -> None:
        self.error = error
        logger.error(
            "[%s] policy %r stopped at step %d, the other policies go on: %s",
            self.run,
            self.policy,
            self.progress.step,
            error,
        )

    def result(self, reason: str) -> SlotResult:
        limit = self.learning.config.max_steps
        if self.error is not None:
            reason = "failed"
        elif limit and self.progress.step >= limit:
            reason = "max_steps"
        elif self.stopped:
            reason = "stopped"
        return SlotResult(self.run, self.policy, self.progress.step, self.progress.version, reason, self.error)

    async def close(self) -> None:
        self.sink.close()
        if self.own_publisher and self.publisher is not None:
            await self.publisher.close()


def policy_trainer(model: Any, adapter: str, config: LearnerConfig) -> tuple[Any, Trainer]:
    """Adapter ``adapter`` on ``model`` (a bare base model for the first), with its own AdamW and schedule:
    (the PeftModel, the slot's trainer over the shared model). A fresh LoRA, or a warm start's
    (``lora.init_adapter``), whose weights are then also its KL reference (beta > 0), as alone."""
    warm = config.lora.init_adapter
    if warm:
        model = load_adapter(model, adapter, warm, config.lora.seed)
    else:
        model = add_adapter(model, adapter, lora_config(config), config.lora.seed)
    params = adapter_parameters(model, adapter)
    reference = None
    if warm and config.loss.beta > 0:  # the policy's start, copied before any checkpoint is restored
        reference = ReferenceWeights(tuple(p.detach().clone() for p in params))
    optimizer, scheduler = optimizer_for(params, config)
    return model, Trainer(model, optimizer, scheduler, reference, adapter)


async def open_slot(
    store: Store,
    run: str,
    run_id: int,
    config: LearnerConfig,
    trainer: Trainer,
    publisher: Publisher | None,
    own_publisher: bool,
) -> PolicySlot:
    """The slot of ``run``'s policy: settings as its gateway serves them, resumed from its last
    committed checkpoint, its resumed version published if the gateway lacks it."""
    activate(trainer.model, trainer.adapter)
    config = await resolve_max_staleness(await resolve_token_budget(config, publisher, trainer), publisher)
    tell_followers("budget", (trainer.adapter, config.batch.token_budget))  # under torchrun: learner.policy_followers
    progress = await resume(store, run_id, config, trainer)
    tell_followers("resume", (trainer.adapter, progress.resumed_from))
    park(trainer.optimizer, trainer.model)  # a restored optimizer's moments come back beside the weights
    policy = await trained_policy(store, run)
    if publisher is not None:
        publisher.policy = policy  # it publishes that policy's versions only
        await sync_published(publisher, trainer, config, progress)
    learning = Learning(config, store, run, run_id, trainer)
    intake = await open_intake(learning)
    sink = await asyncio.to_thread(MetricsSink, store, run_id, Path(config.tensorboard_dir), None)
    return PolicySlot(learning, policy, publisher, sink, progress, intake, own_publisher)

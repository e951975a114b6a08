"""`harnessrl sft`: a supervised warm start on a run's successful trajectories.

Reads the run's finished rollouts with reward >= ``min_reward`` from the store (``best_of_group``: only
the best of each group, i.e. rejection sampling over a policy run), turns each into its training
samples exactly as the policy saw them (``store.samples``: the call graph's root-to-leaf paths,
side calls left out), trains a fresh LoRA adapter on their sampled tokens (``learner.sft``) with the
learner's model settings, and writes it as a peft adapter folder: the same format the GRPO learner
publishes. With a gateway it is published as the next policy version, which serves it to new
rollouts and which `harnessrl eval` can pin.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from learner.adapter_probe import probe_ids_from
from learner.checkpoint import atomic_write_dir
from learner.config import LearnerConfig
from learner.intake import trained_policy
from learner.publish import Publisher
from learner.sft import SftConfig, SftResult, SftStep, train_sft
from store.records import RolloutStatus
from store.samples import Sample, build_samples
from store.store import Store

PAGE = 1000


@dataclass(frozen=True)
class SftPlan:
    run: str
    database_url: str
    learner: LearnerConfig  # model_dir, LoRA shape, lr, dtype, device
    out_dir: Path  # the adapter is written to out_dir/adapter
    sft: SftConfig = SftConfig()
    min_reward: float = 1.0
    best_of_group: bool = False
    gateway_url: str | None = None  # publish as the next policy version there
    admin_key: str | None = None


@dataclass(frozen=True)
class SftOutcome:
    adapter: Path
    rollouts: int  # successful rollouts trained on
    result: SftResult
    version: int | None  # the policy version it was published as (None: not published)
    seconds: float


async def successful_samples(
    store: Store, run: str, min_reward: float, best_of_group: bool = False
) -> tuple[list[Sample], int]:
    """(samples, rollouts): the run's finished rollouts with reward >= min_reward (the best per group)."""
    chosen: dict[int, tuple[float, int]] = {}  # key (group or rollout) -> (reward, rollout id)
    after = 0
    while page := await store.listings.run_rollouts(run, after, PAGE):
        for rollout, _group in page:
            after = rollout.id
            if rollout.status != RolloutStatus.FINISHED or rollout.reward is None or rollout.reward < min_reward:
                continue
            key = rollout.group_id if best_of_group else -rollout.id
            if key not in chosen or rollout.reward > chosen[key][0]:
                chosen[key] = (rollout.reward, rollout.id)
    samples = []
    for _reward, rollout_id in sorted(chosen.values(), key=lambda pair: pair[1]):
        samples += build_samples(await store.calls.nodes(rollout_id))
    return samples, len(chosen)


def run_sft(plan: SftPlan, on_step: Callable[[SftStep], None] = lambda step: None) -> SftOutcome:
    from learner.trainer import build_trainer

    started = time.monotonic()
    samples, rollouts = asyncio.run(_read(plan))
    if not samples:
        raise ValueError(
            f"run {plan.run!r} has no finished rollout with reward >= {plan.min_reward}: nothing to "
            f"imitate; lower --min-reward, or record a teacher or best-of-G run first"
        )
    trainer = build_trainer(plan.learner)
    result = train_sft(trainer.model, trainer.optimizer, samples, plan.sft, on_step)
    adapter = atomic_write_dir(plan.out_dir / "adapter", trainer.model.save_pretrained)
    summary = {
        "run": plan.run,
        "min_reward": plan.min_reward,
        "best_of_group": plan.best_of_group,
        "rollouts": rollouts,
        "samples": result.samples,
        "refused": result.refused,
        "steps": [asdict(step) for step in result.steps],
    }
    (plan.out_dir / "sft.json").write_text(json.dumps(summary, indent=1))
    probe = probe_ids_from(samples[0].input_ids)  # the adapter is proven on what it was trained on
    version = asyncio.run(_publish(plan, trainer.model, probe)) if plan.gateway_url else None
    return SftOutcome(adapter, rollouts, result, version, time.monotonic() - started)


async def _read(plan: SftPlan) -> tuple[list[Sample], int]:
    store = Store.from_url(plan.database_url)
    try:
        if not await store.listings.run_exists(plan.run):
            raise ValueError(f"no run named {plan.run!r} in {plan.database_url}; `harnessrl ls runs` lists them")
        return await successful_samples(store, plan.run, plan.min_reward, plan.best_of_group)
    finally:
        await store.close()


async def _publish(plan: SftPlan, model, probe_ids: tuple[int, ...]) -> int:
    """Publish the adapter as the next version of the run's policy (``store.policies``)."""
    store = Store.from_url(plan.database_url)
    try:
        policy = await trained_policy(store, plan.run)
    finally:
        await store.close()
    publisher = Publisher(plan.gateway_url, plan.admin_key or "", plan.out_dir / "adapters", policy=policy)
    try:
        version = await publisher.current_version() + 1
        await publisher.publish(model, version, probe_ids)
        return version
    finally:
        await publisher.close()

"""Builders for the tests of one learner over several policies: runs of named policies with ready groups,
per-run settings on the tiny model, a publisher that records what it was given."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from safetensors.torch import load_file

from learner.adapters import save_adapter
from learner.config import LearnerConfig
from learner.policies_loop import RunSource, fixed_runs, run_policies
from learner.publish import Published
from store.rollout_asks import AskedSettings
from store.store import Store
from tests.builders import call_record
from tests.learner_groups import LOGPROB, group_of
from tests.learner_runs import tiny_learner_config

SIGNAL = [0.0, 1.0, 0.5, 0.0]  # rewards with a spread: the group trains
FLAT = [1.0, 1.0, 1.0, 1.0]  # no spread: nothing to learn, no optimizer step


async def add_run_group(store: Store, run: str, rewards: list[float], seed: int, end: bool = True) -> list[int]:
    """One group of ``run`` (its policy is the run's name) with one call per rollout; ended unless end=False."""
    rng = np.random.default_rng(seed)
    rollouts = []
    for _ in rewards:
        identity = await store.create_rollout(
            run, f"task-{seed}", group_size=len(rewards), settings=AskedSettings(policy=run)
        )
        prompt, output = rng.integers(10, 1000, 12).tolist(), rng.integers(10, 1000, 6).tolist()
        await store.insert_calls(
            [call_record(identity.rollout_id, prompt_ids=prompt, output_ids=output, output_logprobs=[LOGPROB] * 6)]
        )
        rollouts.append(identity.rollout_id)
    if end:
        await end_rollouts(store, rollouts, rewards)
    return rollouts


async def end_rollouts(store: Store, rollouts: list[int], rewards: list[float]) -> None:
    for rollout_id, reward in zip(rollouts, rewards, strict=True):
        await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})


async def fill_run(store: Store, run: str, n: int, seed: int = 0, rewards: list[float] = SIGNAL) -> list[int]:
    """n ready groups of ``run``; their ids in ready order."""
    return [await group_of(store, (await add_run_group(store, run, rewards, seed + k))[0]) for k in range(n)]


def configs_for(model_dir: Path, out: Path, per_run: dict[str, dict] | None = None, **overrides):
    """Each run's settings on the tiny model, in folders of its own (``per_run``: its own overrides)."""

    def config(run: str) -> LearnerConfig:
        return tiny_learner_config(model_dir, out / run, **{**overrides, **(per_run or {}).get(run, {})})

    return config


async def train_policies(configs, store: Store, runs: list[str] | RunSource, timeout_s: float = 60, **kwargs):
    source = fixed_runs(runs) if isinstance(runs, list) else runs
    return await asyncio.wait_for(
        run_policies(configs, store, source, poll_interval_s=0.02, handle_signals=False, **kwargs), timeout_s
    )


def checkpoint_adapter(config: LearnerConfig, step: int) -> dict:
    return load_file(Path(config.checkpoint.dir) / f"step-{step:08d}" / "adapter" / "adapter_model.safetensors")


class RecordingPublisher:
    """A gateway that serves whatever it is given: each version's adapter saved under ``folder``."""

    def __init__(self, folder: Path):
        self.folder, self.policy = folder, ""
        self.published: list[int] = []

    async def current_version(self) -> int:
        return self.published[-1] if self.published else 0

    async def max_model_len(self) -> int | None:
        return None

    async def max_staleness(self) -> int | None:
        return None

    async def publish(self, model, version: int, probe_ids=None) -> Published:
        save_adapter(model, self.folder / f"v{version}")
        self.published.append(version)
        return Published(version, f"{self.policy}-v{version}", str(self.folder), 0.01, 0.02, 0.01, 1)

    def adapter(self, version: int) -> dict:
        return load_file(self.folder / f"v{version}" / "adapter_model.safetensors")

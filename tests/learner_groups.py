"""Ready groups in a store for the learner's loop tests, and reading back what it trained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from learner.config import LearnerConfig
from learner.publish import GatewayUnreachable, Published
from store.listings import GroupFilter
from store.store import Store
from tests.builders import call_record
from tests.learner_reads import stored_checkpoints
from tests.learner_runs import tiny_learner_config, train_run

RUN = "learn"
ADMIN = "k"
LOGPROB = -7.6  # ~log(1 / vocab): the random model's log-probs, so importance ratios start near 1


class Crash(Exception):
    """Stands in for the process dying at a chosen point."""


async def add_group(
    store: Store, task: str, rewards: list[float | None], *, version: int = 0, seed: int = 0, end: bool = True
) -> list[int]:
    """One group of len(rewards) rollouts with one call each; ended (so ready) unless end=False."""
    rng = np.random.default_rng(seed)
    rollout_ids = []
    for _ in rewards:
        identity = await store.create_rollout(RUN, task, group_size=len(rewards))
        prompt, output = rng.integers(10, 1000, 12).tolist(), rng.integers(10, 1000, 6).tolist()
        await store.insert_calls(
            [
                call_record(
                    identity.rollout_id,
                    prompt_ids=prompt,
                    output_ids=output,
                    output_logprobs=[LOGPROB] * 6,
                    policy_version=version,
                )
            ]
        )
        rollout_ids.append(identity.rollout_id)
    if end:
        for rollout_id, reward in zip(rollout_ids, rewards):
            await store.end_rollout(rollout_id, "finished", rewards={"verifier": reward})
    return rollout_ids


async def group_of(store: Store, rollout_id: int) -> int:
    return (await store.get_rollout(rollout_id))[0].group_id


async def fill(store: Store, n: int) -> list[int]:
    """n ready groups with a learning signal; returns their ids in ready order."""
    groups = []
    for k in range(n):
        rollouts = await add_group(store, f"task-{k}", [0.0, 1.0, float(k % 3), 0.5], seed=k)
        groups.append(await group_of(store, rollouts[0]))
    return groups


def config_for(tiny_model_dir: Path, out: Path, **overrides) -> LearnerConfig:
    return tiny_learner_config(tiny_model_dir, out, **overrides)


async def train(config: LearnerConfig, store: Store, **kwargs):
    return await train_run(config, store, RUN, **kwargs)


async def history(store: Store) -> list[tuple[int, ...]]:
    return [record.group_ids for record in await stored_checkpoints(store, RUN)]


def final_adapter(config: LearnerConfig, step: int) -> dict[str, torch.Tensor]:
    return load_file(Path(config.checkpoint.dir) / f"step-{step:08d}" / "adapter" / "adapter_model.safetensors")


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)


async def statuses(store: Store) -> dict[int, str]:
    return {g.id: g.status for g, _, _ in await store.listings.groups(GroupFilter(run=RUN), 0, 1000)}


async def add_groups(store: Store, rewards: list[list[float]], seed: int) -> None:
    for k, group in enumerate(rewards):
        await add_group(store, f"task-{seed}-{k}", group, seed=seed + k)


class FlakyPublisher:
    """A gateway that is unreachable for the first publication."""

    def __init__(self):
        self.published: list[int] = []
        self.failures = 1

    async def current_version(self) -> int:
        return self.published[-1] if self.published else 0

    async def max_model_len(self) -> int | None:
        raise GatewayUnreachable("connection refused")

    async def max_staleness(self) -> int | None:
        raise GatewayUnreachable("connection refused")

    async def publish(self, model, version: int, probe_ids=None):
        if self.failures:
            self.failures -= 1
            raise GatewayUnreachable("connection refused")
        self.published.append(version)
        return Published(version, f"policy-v{version}", "/a", 0.01, 0.02, 0.01, 1)

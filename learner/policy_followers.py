"""Several policies under torchrun (data parallelism): rank 0 runs learner.policies_loop, the other ranks
mirror each of its policies on their own copy of the base model.

As a policy joins, rank 0 builds its adapter (``learner.policy_slot.policy_trainer``), then tells the
followers ``("join", (adapter, its LearnerConfig))`` on learner.ranks' one channel: each builds the same
adapter with its own AdamW and schedule over its model, and takes rank 0's adapter weights. The slot's
``budget`` and ``resume`` follow as it opens, then a ``batch`` per step of that adapter, which each rank
trains with that adapter active, its share of the rows, the gradients summed over ranks
(learner.distributed). An adapter is never removed: a policy that stops or fails keeps it idle on every
rank, as on rank 0. A step that raises stops its policy alone on every rank (it raises on each).

Only with ``[parallel] shard = "none"``: FSDP2 (learner.sharding) fixes what it shards and what it
leaves whole (the trainable LoRA weights) when the base is sharded, before any policy joins, while
policies join here at any time, each adding LoRA weights inside the sharded layers; that is refused.
"""

from __future__ import annotations

import logging
from typing import Any

from learner.adapters import adapter_parameters
from learner.config import LearnerConfig
from learner.distributed import broadcast_params, world
from learner.policy_slot import policy_trainer
from learner.progress import LearnerError
from learner.ranks import Followed, mirror, tell_followers
from learner.trainer import Trainer, load_base

logger = logging.getLogger("learner")

SHARDED_POLICIES = (
    "several policies under torchrun train with data parallelism only: parallel.shard = 'fsdp' shards the "
    "base before the policies' adapters join it; set parallel.shard = 'none' (every rank holds the whole "
    "base), or give each policy a learner of its own (`harnessrl train --run RUN` under torchrun shards it)"
)


def refuse_sharded(config: LearnerConfig, world_size: int) -> None:
    """LearnerError naming the fix when several policies would train on an FSDP-sharded base."""
    if world_size > 1 and config.parallel.shard == "fsdp":
        raise LearnerError(SHARDED_POLICIES)


def lead_join(model: Any, adapter: str, config: LearnerConfig) -> tuple[Any, Trainer]:
    """Rank 0: ``policy_trainer``'s (model, trainer), with every follower told to build the same adapter and
    given its weights (a blocking collective: in a worker thread)."""
    model, trainer = policy_trainer(model, adapter, config)
    tell_followers("join", (adapter, config))
    broadcast_params(adapter_parameters(model, adapter))
    return model, trainer


def follow_policies() -> dict[str, int]:
    """A rank other than 0 of a learner of several policies: mirror rank 0's policies until it stops; the
    steps each adapter took here."""
    return mirror(Followed(several=True), _join)


def _join(followed: Followed, adapter: str, config: LearnerConfig) -> None:
    if followed.model is None:
        followed.model = load_base(config)
    followed.model, trainer = policy_trainer(followed.model, adapter, config)
    broadcast_params(adapter_parameters(followed.model, adapter))  # rank 0's start (a fresh LoRA is random)
    followed.trainers[adapter] = trainer
    logger.info("rank %d: policy adapter %s joined", world()[0], adapter)

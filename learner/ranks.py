"""`harnessrl train` under torchrun: rank 0 leads, every other rank follows.

Rank 0 runs the whole loop (store, checkpoints, publishing, metrics). The others never touch the
store: they build the same model, load the checkpoint rank 0 resumed from, and for every step take
the batch rank 0 built, so ``learner.trainer.train_batch`` can give each rank its share of the rows
and sum the gradients (``learner.distributed``). Rank 0 tells the followers what to do in order, on
one channel (``broadcast_object_list``), each instruction about one adapter (``"default"`` alone):
``("budget", (adapter, token_budget))``, ``("resume", (adapter, path | None))``, ``("batch", (adapter,
Batch))`` per step, then ``("stop", None)``. Beside other policies (learner.policy_followers) a policy's
adapter is first announced by ``("join", (adapter, LearnerConfig))``. Without a process group every
function here does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from learner.adapters import activate, adapter_parameters
from learner.checkpoint import load_checkpoint
from learner.config import LearnerConfig
from learner.distributed import is_distributed, world
from learner.groups import Batch
from learner.parking import park, unpark
from learner.trainer import Trainer, build_trainer, train_batch

logger = logging.getLogger("learner")


def init_from_env() -> bool:
    """Join the process group torchrun describes in the environment (WORLD_SIZE > 1); True if joined."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return False
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    return True


@contextmanager
def process_group() -> Iterator[bool]:
    """Join torchrun's process group for the block (yields whether one was joined) and leave it together.

    On a clean exit every rank waits for the others before tearing down: a rank that destroys its gloo
    pairs while a peer still uses them aborts ("terminate called without an active exception"). After an
    error the group is left as it is: a barrier or teardown could wait forever on a peer stuck in a
    collective, and torchrun ends the other ranks once one fails.
    """
    joined = init_from_env()
    yield joined
    if joined and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def is_leader() -> bool:
    return world()[0] == 0


def tell_followers(kind: str, payload: Any = None) -> None:
    """Rank 0 only: the next instruction for every other rank (a no-op in one process)."""
    if is_distributed():
        dist.broadcast_object_list([(kind, payload)], src=0)


def _instruction() -> tuple[str, Any]:
    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


@dataclass
class Followed:
    """What a following rank mirrors of rank 0 (mutable: adapters join, step): by adapter name, its trainer,
    its settings and the steps it took here."""

    trainers: dict[str, Trainer] = field(default_factory=dict)
    configs: dict[str, LearnerConfig] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    model: Any = None  # the model every adapter shares
    several: bool = False  # several policies: each steps activated, its moments parked, its failure its own


Join = Callable[[Followed, str, LearnerConfig], None]  # build a joining policy's adapter as rank 0 did


def follow(config: LearnerConfig) -> int:
    """A rank other than 0: mirror rank 0's steps until it says stop; returns the steps taken."""
    trainer = build_trainer(config)  # a collective: rank 0 builds its trainer at the same time
    followed = Followed({trainer.adapter: trainer}, {trainer.adapter: config}, {trainer.adapter: 0}, trainer.model)
    return sum(mirror(followed).values())


def mirror(followed: Followed, join: Join | None = None) -> dict[str, int]:
    """Take rank 0's instructions until it says stop; the steps each adapter took here."""
    while True:
        kind, payload = _instruction()
        if kind == "stop":
            steps = sum(followed.steps.values())
            each = f" ({', '.join(f'{a}: {n}' for a, n in followed.steps.items())})" if followed.several else ""
            logger.info("rank %d: rank 0 stopped after %d steps here%s", world()[0], steps, each)
            return followed.steps
        adapter, value = payload
        if kind == "join" and join is not None:
            join(followed, adapter, value)
            followed.configs[adapter], followed.steps[adapter] = value, 0
        elif kind == "budget":  # rank 0 resolved token_budget = 0 (the engine's max model length)
            followed.configs[adapter] = followed.configs[adapter].updated(batch={"token_budget": value})
        elif kind == "resume" and value is not None:
            _resume(followed, adapter, value)
        elif kind == "batch":
            _step(followed, adapter, value)


def _resume(followed: Followed, adapter: str, path: str) -> None:
    trainer = followed.trainers[adapter]
    load_checkpoint(Path(path), trainer.model, trainer.optimizer, trainer.scheduler, adapter)
    if followed.several:  # as rank 0's slot: the restored moments wait in host memory until its step
        park(trainer.optimizer, trainer.model)


def _step(followed: Followed, adapter: str, batch: Batch) -> None:
    trainer, config = followed.trainers[adapter], followed.configs[adapter]
    if not followed.several:
        train_batch(trainer, batch, config)
        followed.steps[adapter] += 1
        return
    activate(trainer.model, adapter)
    unpark(trainer.optimizer, trainer.model)
    try:
        train_batch(trainer, batch, config)
        followed.steps[adapter] += 1
    except Exception as exc:  # noqa: BLE001 - rank 0's step raised the same: that policy stops alone there too
        logger.error("rank %d: policy adapter %s stopped on %s", world()[0], adapter, exc)
        for p in adapter_parameters(trainer.model, adapter):
            p.grad = None
    finally:
        park(trainer.optimizer, trainer.model)

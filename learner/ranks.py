"""`harnessrl train` under torchrun: rank 0 leads, every other rank follows.

Rank 0 runs the whole loop (store, checkpoints, publishing, metrics). The others never touch the
store: they build the same model, load the checkpoint rank 0 resumed from, and for every step take
the batch rank 0 built, so ``learner.trainer.train_batch`` can give each rank its share of the rows
and sum the gradients (``learner.distributed``). Rank 0 tells the followers what to do in order, on
one channel (``broadcast_object_list``): ``("budget", token_budget)``, ``("resume", path | None)``,
``("batch", Batch)`` per step,
then ``("stop", None)``. Without a process group every function here does nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from learner.checkpoint import load_checkpoint
from learner.config import LearnerConfig
from learner.distributed import is_distributed, world
from learner.trainer import build_trainer, train_batch

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


def follow(config: LearnerConfig) -> int:
    """A rank other than 0: mirror rank 0's steps until it says stop; returns the steps taken."""
    trainer = build_trainer(config)  # a collective: rank 0 builds its trainer at the same time
    steps = 0
    while True:
        kind, payload = _instruction()
        if kind == "budget":  # rank 0 resolved token_budget = 0 (the engine's max model length)
            config = config.updated(batch={"token_budget": payload})
        elif kind == "resume" and payload is not None:
            load_checkpoint(Path(payload), trainer.model, trainer.optimizer, trainer.scheduler)
        elif kind == "batch":
            train_batch(trainer, payload, config)
            steps += 1
        elif kind == "stop":
            logger.info("rank %d: rank 0 stopped after %d steps here", world()[0], steps)
            return steps

"""Data parallelism for the learner (``torchrun``, any backend; gloo on CPU): rows split across ranks,
gradients and loss statistics summed across them, so one step equals one process on the whole batch.

Gradients are all-reduced by hand, once per optimizer step, after every row has been back-propagated,
rather than by wrapping the model in ``DistributedDataParallel``: DDP averages (not sums) on every
``backward`` and needs the same number of backward calls on every rank, while packed rows split
unevenly (a rank may get fewer rows, or none). One flat all-reduce per step moves the LoRA gradients
(a few MB) once and tolerates any split.

Without an initialised process group (a plain ``harnessrl train``) every function here is the
identity, so single-process behaviour is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from learner.loss import LossStats
from learner.mismatch import MismatchStats, merge_call_deltas

T = TypeVar("T")


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when not running distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_distributed() -> bool:
    return world()[1] > 1


def shard(items: Sequence[T], sizes: Sequence[int], rank: int, world_size: int) -> list[T]:
    """This rank's share of ``items`` (e.g. packed rows; ``sizes`` their token counts), balanced by size.

    Greedy, largest first, each to the least-loaded rank (ties: lowest rank, then input order): every
    rank computes the same split from the same list, so no coordination is needed. Order is kept.
    """
    load = [0] * world_size
    owner = [0] * len(items)
    for i in sorted(range(len(items)), key=lambda i: (-sizes[i], i)):
        target = min(range(world_size), key=lambda r: (load[r], r))
        owner[i] = target
        load[target] += sizes[i]
    return [item for item, r in zip(items, owner) if r == rank]


def broadcast_trainable(model: nn.Module, src: int = 0) -> None:
    """Give every rank rank ``src``'s trainable weights (LoRA init is random: seeds may differ)."""
    broadcast_params([p for p in model.parameters() if p.requires_grad], src)


def broadcast_params(params: Sequence[nn.Parameter], src: int = 0) -> None:
    """Give every rank rank ``src``'s values of ``params`` (the same list, in the same order, on every rank)."""
    if not is_distributed():
        return
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src)


def all_reduce_gradients(params: Sequence[nn.Parameter]) -> None:
    """Sum ``.grad`` over ranks in one flat all-reduce.

    A parameter no rank produced a gradient for keeps ``grad = None`` (as in one process, where AdamW
    then skips it); one that only some ranks touched gets the sum, with zeros from the others.
    """
    if not is_distributed() or not params:
        return
    if any(isinstance(p, DTensor) for p in params):  # summing FSDP's already reduced shards would double them
        raise RuntimeError(
            "the trainable weights are FSDP-sharded, and FSDP reduces their gradients itself: shard the base "
            "with learner.sharding.shard_base, which keeps them whole on every rank"
        )
    device = params[0].device
    has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
    flat = torch.cat([_grad_or_zeros(p).reshape(-1).float() for p in params])
    dist.all_reduce(has_grad)
    dist.all_reduce(flat)
    offset = 0
    for p, present in zip(params, has_grad.tolist()):
        n = p.numel()
        if present:
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
        offset += n


def sum_over_ranks(values: Sequence[float], device: torch.device | str = "cpu") -> list[float]:
    """Element-wise sums over ranks (float64: token counts stay exact past 2**24)."""
    if not is_distributed():
        return list(values)
    total = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return total.tolist()


def all_reduce_stats(stats: LossStats, device: torch.device | str = "cpu") -> LossStats:
    """The step's loss statistics over every rank: sums summed, ratio min/max over all ranks."""
    if not is_distributed():
        return stats
    s = sum_over_ranks(
        [
            stats.tokens_sampled,
            stats.tokens_trained,
            stats.tokens_clipped_low,
            stats.tokens_clipped_high,
            stats.loss_sum,
            stats.kl_sum,
            stats.entropy_sum,
            stats.ratio_sum,
            stats.echo_tokens,
            stats.echo_nll_sum,
        ],
        device,
    )
    extremes = torch.tensor([stats.ratio_min, -stats.ratio_max], dtype=torch.float64, device=device)
    dist.all_reduce(extremes, op=dist.ReduceOp.MIN)  # the max as the min of its negation: one call
    low, neg_high = extremes.tolist()
    return LossStats(
        int(s[0]), int(s[1]), int(s[2]), int(s[3]), s[4], s[5], s[6], s[7], low, -neg_high, int(s[8]), s[9]
    )


def all_reduce_mismatch(stats: MismatchStats, device: torch.device | str = "cpu") -> MismatchStats:
    """The step's train/inference mismatch over every rank: sums summed, the max over all ranks."""
    if not is_distributed():
        return stats
    s = sum_over_ranks([stats.tokens, stats.abs_sum, stats.k3_sum, stats.over], device)
    high = torch.tensor([stats.abs_max], dtype=torch.float64, device=device)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return MismatchStats(int(s[0]), s[1], float(high.item()), s[2], int(s[3]))


def gather_call_deltas(per_call: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Every rank's per-call mismatch on rank 0, merged (``learner.mismatch.merge_call_deltas``); the
    other ranks get nothing back. A collective: every rank calls it for every batch."""
    if not is_distributed():
        return per_call
    rank, size = world()
    parts: list[dict[int, np.ndarray]] | None = [{} for _ in range(size)] if rank == 0 else None
    dist.gather_object(per_call, parts, dst=0)
    return merge_call_deltas(parts) if parts is not None else {}


def _grad_or_zeros(p: nn.Parameter) -> torch.Tensor:
    return p.grad if p.grad is not None else torch.zeros_like(p)

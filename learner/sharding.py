"""The frozen base sharded across ranks with FSDP2 (``[parallel] shard = "fsdp"``), for a base that does
not fit on one device; the LoRA weights stay whole on every rank.

What is sharded: every decoder layer's base weights, one ``fully_shard`` group per layer, under one
root group on the decoder (``lm.get_decoder()``), which is what ``learner.forward.hidden_states``
calls. A layer's weights are all-gathered just before it runs, forward and backward, and freed after.

What is not (``ignored_params``), and why:
- the LoRA weights (and any other trainable weight): FSDP would reduce-scatter their gradients on
  every backward, but packed rows split unevenly, so ranks run different rows and a padding row's
  gradient would be summed into another rank's. Kept replicated, they are summed once per step by
  ``learner.distributed.all_reduce_gradients`` exactly as in data parallelism, so the loss
  normalisation (sum over ranks, then 1 / tokens trained over all ranks) and clipping are unchanged.
  They are also float32 beside a bfloat16 base, and one FSDP group needs one dtype. A few hundred MB
  at most (with their AdamW state), against the base's tens of GB.
- the input and output embeddings: the learner calls the output layer outside the decoder's forward
  (``learner.forward.output_head``), where FSDP would not gather it, and they are often tied.

No MixedPrecisionPolicy: the base is loaded in the training dtype already (``learner.trainer``), and
FSDP reduces no gradient here, so there is nothing for it to cast.

FSDP2 needs every rank to run the same forwards and backwards (each all-gathers every layer). A rank
with fewer rows runs padding rows first (``match_forwards``): a copy of the batch's smallest trained
row, whose gradient is cleared by ``train_step``'s ``zero_grad`` and whose statistics are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from torch import nn

from learner.distributed import shard, world
from learner.forward import causal_lm
from learner.packing import PackedRow
from learner.step import StepConfig, accumulate_gradients

SHARD_CHOICES = ("none", "fsdp")
logger = logging.getLogger("learner")


def shard_base(model: nn.Module, device: torch.device | str) -> nn.Module:
    """Shard ``model``'s frozen decoder layers over every rank of the process group, in place.

    ``model``: a peft model (or a plain causal LM), on the CPU or already on ``device``; the weights FSDP
    ignores are moved to ``device``, the sharded ones go there one shard at a time.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = torch.device(device)
    lm = causal_lm(model)
    decoder = lm.get_decoder()
    if not isinstance(getattr(decoder, "layers", None), nn.ModuleList):
        raise ValueError(
            f"{type(decoder).__name__} keeps no decoder layers in .layers: set [parallel] shard = 'none', "
            "or teach learner.sharding.shard_base where this architecture keeps them"
        )
    ignored = {p for p in model.parameters() if p.requires_grad}
    for embedding in (lm.get_input_embeddings(), lm.get_output_embeddings()):
        if embedding is not None:
            ignored.update(embedding.parameters())
    for p in ignored:
        p.data = p.data.to(device)
    mesh = init_device_mesh(device.type, (world()[1],))
    for layer in decoder.layers:
        fully_shard(layer, mesh=mesh, ignored_params=ignored & set(layer.parameters()))
    fully_shard(decoder, mesh=mesh, ignored_params=ignored & set(decoder.parameters()))
    lm.to(device)  # what FSDP left out of its groups (e.g. rotary buffers); no-op for sharded weights
    held, whole = frozen_numel(model)
    logger.info("FSDP2: rank %d holds %d of the base's %d frozen weights", world()[0], held, whole)
    return model


def frozen_numel(model: nn.Module) -> tuple[int, int]:
    """(elements of the frozen weights this rank holds, elements of all of them)."""
    from torch.distributed.tensor import DTensor

    held = whole = 0
    for p in model.parameters():
        if not p.requires_grad:
            held += p.to_local().numel() if isinstance(p, DTensor) else p.numel()
            whole += p.numel()
    return held, whole


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def padding_rows(rows: Sequence[PackedRow], rank: int, world_size: int) -> list[PackedRow]:
    """Rows this rank must forward and back-propagate, beyond its share (``learner.distributed.shard``),
    so that every rank runs as many forwards with a trained token as the busiest one.

    Each is the batch's smallest row with a trained (GRPO or echo) token (cheapest); none when no row has one (then no
    rank forwards anything) or when this rank is the busiest.
    """
    sizes = [row.num_tokens for row in rows]
    counts = [sum(row.trains for row in shard(rows, sizes, r, world_size)) for r in range(world_size)]
    trained = [row for row in rows if row.trains]
    if not trained:
        return []
    smallest = min(trained, key=lambda row: row.num_tokens)
    return [smallest] * (max(counts) - counts[rank])


def match_forwards(model: nn.Module, rows: Sequence[PackedRow], config: StepConfig, rank: int, world_size: int) -> int:
    """Run this rank's padding rows (``padding_rows`` of the whole batch's ``rows``) before its step:
    their collectives pair with the busiest rank's extra rows; their gradients land in ``.grad``, which
    ``learner.step.train_step`` clears before its own rows, and their statistics are dropped. Returns
    how many were run (0 when the model is not sharded)."""
    if not is_sharded(model):
        return 0
    padding = padding_rows(rows, rank, world_size)
    if padding:
        accumulate_gradients(model, padding, config)
    return len(padding)

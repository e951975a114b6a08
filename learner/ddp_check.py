"""Does a data-parallel step equal one process on the whole batch? A tiny random Qwen2 with LoRA, a
fixed batch of packed rows, the learner's own ``train_step``.

Run under torchrun (gloo on CPU); each rank writes its LoRA weights and step metrics to
``OUT/rank{R}.pt`` for comparison with ``run_steps(all rows)`` in one process::

    python -m torch.distributed.run --standalone --nproc_per_node 2 -m learner.ddp_check --out DIR

``--shard fsdp`` first shards the base's decoder layers with FSDP2 (``learner.sharding``); rank 0 then
also saves the adapter as publishing does (``OUT/adapter``).

The batch is built so that every code path that must agree across ranks is exercised: rows of
unequal length split unevenly, old log-probs perturbed off-policy so some tokens are masked by the
importance ratio and some clipped, and a gradient norm above ``max_grad_norm`` so clipping uses the
global norm.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from learner.distributed import broadcast_trainable, shard, world
from learner.forward import ForwardConfig
from learner.loss import token_logprobs
from learner.packing import PackedRow, pack_samples
from learner.ranks import process_group
from learner.sharding import SHARD_CHOICES, frozen_numel, match_forwards, shard_base
from learner.step import StepConfig, train_step
from learner.tiny_model import tiny_base, tiny_lora
from store.samples import Sample

VOCAB = 256
TOKEN_BUDGET = 64
LR = 1e-2
MAX_GRAD_NORM = 0.1  # below this batch's norm (~0.3): clipping is on
# rows of 32+ tokens recompute their layers in the backward (exact): sharded layers are gathered again there
FORWARD = ForwardConfig(checkpoint_min_tokens=32)


def tiny_lora_model(seed: int = 0) -> torch.nn.Module:
    """The tiny Qwen2 (float32, sdpa, ``learner.tiny_model``) with LoRA r8 on the attention projections,
    B moved off 0 so the first step's gradient reaches A too."""
    return tiny_lora(tiny_base(attention="sdpa", seed=seed, vocab=VOCAB), moved=True)


def fixed_rows(model: torch.nn.Module, seed: int = 0, n: int = 12) -> list[PackedRow]:
    """Packed rows of ``n`` samples (lengths 5..40); old log-probs = the model's own + noise."""
    rng = np.random.default_rng(seed)
    samples, advantages = [], []
    for _ in range(n):
        length = int(rng.integers(5, 41))
        ids = rng.integers(0, VOCAB, length)
        mask = np.zeros(length, np.int8)
        mask[int(rng.integers(1, length - 1)) :] = 1
        with torch.no_grad():
            ids_t = torch.from_numpy(ids)[None]
            own = token_logprobs(model(input_ids=ids_t).logits, ids_t)[0].numpy()
        noise = rng.normal(0.0, 1.0, length)  # ratios spread over ~[0.05, 20]: masking and clipping both happen
        old = np.where(mask == 1, own + noise, 0).astype(np.float32)
        samples.append(Sample((0,), ids.astype(np.int32), mask, old, np.where(mask == 1, 0, -1).astype(np.int32)))
        advantages.append(float(rng.normal()))
    return list(pack_samples(samples, advantages, TOKEN_BUDGET).rows)


def run_steps(
    model: torch.nn.Module, rows: list[PackedRow], steps: int = 2, batch: list[PackedRow] | None = None
) -> list[dict]:
    """``steps`` AdamW steps on the same rows (the second one also checks the optimizer state agrees).
    ``batch``: every rank's rows, when ``rows`` is this rank's share and the base is sharded (the rank
    then pads its forwards to the busiest rank's, as ``learner.trainer.train_batch`` does)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR)
    config = StepConfig(max_grad_norm=MAX_GRAD_NORM, forward=FORWARD)
    metrics = []
    for _ in range(steps):
        padding = match_forwards(model, batch, config, *world()) if batch is not None else 0
        metrics.append({**train_step(model, optimizer, rows, config), "padding_rows": padding})
    return metrics


def lora_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for rank{R}.pt")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--samples", type=int, default=12, help="samples in the fixed batch (fixed_rows' n)")
    parser.add_argument("--shard", choices=SHARD_CHOICES, default="none", help="fsdp: shard the base (FSDP2)")
    args = parser.parse_args()
    with process_group():
        rank, size = world()
        model = tiny_lora_model()
        broadcast_trainable(model)
        rows = fixed_rows(model, n=args.samples)  # the same batch on every rank, then each takes its share
        if args.shard == "fsdp":
            shard_base(model, "cpu")
        mine = shard(rows, [row.num_tokens for row in rows], rank, size)
        metrics = run_steps(model, mine, args.steps, batch=rows)
        args.out.mkdir(parents=True, exist_ok=True)
        if rank == 0 and args.shard == "fsdp":
            model.save_pretrained(args.out / "adapter")  # as publishing and checkpoints save it
        torch.save(
            {
                "weights": lora_weights(model),
                "metrics": metrics,
                "rows": len(mine),
                "of_rows": len(rows),
                "base_numel": frozen_numel(model),
            },
            args.out / f"rank{rank}.pt",
        )


if __name__ == "__main__":
    main()

"""One optimizer step of GRPO on packed rows: forward, loss, backward, accumulate, clip, step.

Each packed row is one micro-batch (batch size 1, padding-free). The loss is normalised by the number
of tokens actually trained over the whole step, which is only known once every row has been through
the importance-ratio mask; so each row back-propagates its *sum* of per-token losses and the summed
gradients are divided by the final count before clipping. That is exact (gradients are linear) and
needs no second forward. Under ``torchrun`` each rank passes its share of the rows
(``learner.distributed.shard``); the gradients and the counts are summed over ranks before scaling, so
the update is the one a single process would take on all the rows (see learner.distributed).

The model is typically a peft ``PeftModel`` with LoRA; only parameters with ``requires_grad`` are
clipped. Its train/eval mode is the caller's: with LoRA dropout 0 (recommended, so the learner's
log-probs are those of the policy the sampler ran) both modes give the same logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from learner.distributed import all_reduce_gradients, all_reduce_stats, sum_over_ranks
from learner.loss import LossConfig, LossOutput, LossStats, grpo_loss, token_entropy, token_logprobs
from learner.packing import PackedRow, block_causal_mask


@dataclass(frozen=True)
class StepConfig:
    loss: LossConfig = field(default_factory=LossConfig)
    max_grad_norm: float = 1.0  # global L2 norm the trainable gradients are clipped to; <= 0: no clipping
    temperature: float = 1.0  # the sampler's temperature, so learner and sampler log-probs compare
    block_mask: bool = True  # pass block_causal_mask (eager/sdpa); False: rely on position_ids (flash varlen)


def forward_row(model: nn.Module, row: PackedRow, config: StepConfig) -> Tensor:
    """Logits [1, L, V] of one packed row, each sample attending only to itself."""
    device = _device(model)
    positions = row.position_ids.to(device)
    mask = block_causal_mask(positions, dtype=_dtype(model)) if config.block_mask else None  # built on device
    return model(input_ids=row.input_ids[None].to(device), position_ids=positions[None], attention_mask=mask).logits


def reference_logprobs(model: nn.Module, row: PackedRow, config: StepConfig) -> Tensor:
    """Log-probs [1, L] of the base model (LoRA adapter disabled) for the KL term; no gradient."""
    peft_model = getattr(model, "module", model)  # unwrap DDP
    if not hasattr(peft_model, "disable_adapter"):
        raise TypeError("beta > 0 needs a peft model: the reference is the base model with the adapter disabled")
    with torch.no_grad(), peft_model.disable_adapter():
        logits = forward_row(model, row, config)
        return token_logprobs(logits, row.input_ids[None].to(logits.device), config.temperature)


def row_loss(
    logits: Tensor, row: PackedRow, config: StepConfig, normaliser: float, ref_logprobs: Tensor | None = None
) -> LossOutput:
    """The GRPO loss of one row from its logits [1, L, V] (see learner.loss.grpo_loss)."""
    device = logits.device
    input_ids = row.input_ids[None].to(device)
    new = token_logprobs(logits, input_ids, config.temperature)
    with torch.no_grad():
        entropy = token_entropy(logits.detach(), config.temperature)
    return grpo_loss(
        new, row.old_logprobs[None].to(device), row.advantages[None].to(device), row.loss_mask[None].to(device),
        config.loss, normaliser, ref_logprobs=ref_logprobs, entropy=entropy,
    )


def accumulate_gradients(model: nn.Module, rows: list[PackedRow], config: StepConfig) -> LossStats:
    """Back-propagate every row's summed loss into .grad (added to what is there); merged stats."""
    stats = LossStats.empty()
    for row in rows:
        ref = reference_logprobs(model, row, config) if config.loss.beta > 0 else None
        out = row_loss(forward_row(model, row, config), row, config, normaliser=1.0, ref_logprobs=ref)
        out.loss.backward()
        stats = stats.merge(out.stats)
    return stats


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, rows: list[PackedRow], config: StepConfig
) -> dict[str, float | int | bool | None]:
    """One optimizer step over all rows. Skips the step (and says so) when no token was trained or
    the gradient is not finite, so a bad batch cannot corrupt the adapter or the optimizer state."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=True)
    device = _device(model)
    # distributed: every rank sums over all ranks, so all see the same count, norm and skip decision
    stats = all_reduce_stats(accumulate_gradients(model, rows, config), device)
    all_reduce_gradients(params)
    grad_norm, stepped = 0.0, False
    if stats.tokens_trained > 0:
        _scale_grads(params, 1.0 / stats.tokens_trained)
        grad_norm = _clip(params, config.max_grad_norm)
        if math.isfinite(grad_norm):
            optimizer.step()
            stepped = True
    optimizer.zero_grad(set_to_none=True)
    num_rows, tokens = sum_over_ranks([len(rows), sum(row.num_tokens for row in rows)], device)
    return {
        **stats.metrics(),
        "grad_norm": grad_norm,  # before clipping
        "optimizer_stepped": stepped,
        "rows": int(num_rows),
        "tokens": int(tokens),  # forwarded tokens, prompts included
    }


def _scale_grads(params: list[nn.Parameter], factor: float) -> None:
    for p in params:
        if p.grad is not None:
            p.grad.mul_(factor)


def _clip(params: list[nn.Parameter], max_norm: float) -> float:
    limit = max_norm if max_norm > 0 else math.inf
    with_grad = [p for p in params if p.grad is not None]
    if not with_grad:
        return 0.0
    return float(torch.nn.utils.clip_grad_norm_(with_grad, limit))


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _dtype(model: nn.Module) -> torch.dtype:
    """The compute dtype (transformers models say it; LoRA weights may be float32 on a bf16 base)."""
    return getattr(model, "dtype", None) or next(model.parameters()).dtype

"""One optimizer step of GRPO on packed rows: forward, loss, backward, accumulate, clip, step.

Each packed row is one micro-batch (batch size 1, padding-free), forwarded in memory linear in its
length (learner.forward: packed attention, log-probs of the trained tokens from the hidden states in
chunks, activation checkpointing for long rows). The loss is normalised by the number
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

import numpy as np
import torch
from torch import Tensor, nn

from learner.distributed import all_reduce_gradients, all_reduce_mismatch, all_reduce_stats, sum_over_ranks
from learner.forward import (
    ForwardConfig,
    causal_lm,
    chunked_token_logprobs,
    hidden_states,
    output_head,
    packed_mode,
)
from learner.loss import LossConfig, LossOutput, LossStats, grpo_loss
from learner.mismatch import MismatchStats, RowDeltas, deltas_stats, token_deltas
from learner.packing import PackedRow
from learner.reference import ReferenceWeights, reference_policy


@dataclass(frozen=True)
class StepConfig:
    loss: LossConfig = field(default_factory=LossConfig)
    max_grad_norm: float = 1.0  # global L2 norm the trainable gradients are clipped to; <= 0: no clipping
    temperature: float = 1.0  # the sampler's temperature, so learner and sampler log-probs compare
    forward: ForwardConfig = field(default_factory=ForwardConfig)  # attention kernel, chunks, checkpointing


def row_logprobs(model: nn.Module, row: PackedRow, config: StepConfig) -> tuple[Tensor, Tensor]:
    """Log-probs and entropies float32 [M] of the row's trained tokens (``row.targets``), at the
    sampler's temperature; the log-probs carry the gradient. Inside ``packed_mode`` (learner.forward)."""
    device = _device(model)
    hidden = hidden_states(model, row.input_ids.to(device), row.position_ids.to(device), row.layout, config.forward)
    return chunked_token_logprobs(
        hidden[row.predictors.to(device)],
        output_head(causal_lm(model)),
        row.targets.to(device),
        config.temperature,
        config.forward.chunk_tokens,
    )


def reference_logprobs(
    model: nn.Module, row: PackedRow, config: StepConfig, reference: ReferenceWeights | None = None
) -> Tensor:
    """Log-probs [M] of the reference policy for the KL term (learner.reference: the base model, or the
    warm start's adapter when ``reference`` holds its weights); no gradient."""
    with torch.no_grad(), reference_policy(model, reference):
        return row_logprobs(model, row, config)[0]


def row_loss(
    new_logprobs: Tensor,
    entropy: Tensor | None,
    row: PackedRow,
    config: StepConfig,
    normaliser: float,
    ref_logprobs: Tensor | None = None,
) -> LossOutput:
    """The GRPO loss of one row from its trained tokens' log-probs [M] (see learner.loss.grpo_loss)."""
    device = new_logprobs.device
    every = torch.ones(1, row.num_targets, dtype=torch.bool, device=device)  # entries are trained tokens only
    return grpo_loss(
        new_logprobs[None],
        row.old_logprobs[None].to(device),
        row.advantages[None].to(device),
        every,
        config.loss,
        normaliser,
        ref_logprobs=None if ref_logprobs is None else ref_logprobs[None],
        entropy=None if entropy is None else entropy[None],
    )


def accumulate_gradients(
    model: nn.Module,
    rows: list[PackedRow],
    config: StepConfig,
    version: int | None = None,
    deltas: list[RowDeltas] | None = None,
    reference: ReferenceWeights | None = None,
) -> tuple[LossStats, MismatchStats]:
    """Back-propagate every row's summed loss into .grad (added to what is there); merged stats, and
    the train/inference mismatch on the tokens the learner's ``version`` sampled (none when None),
    per token into ``deltas`` when given (one ``RowDeltas`` per row with a compared token).
    ``reference``: the KL term's reference weights (None: the base model; see learner.reference)."""
    stats, mismatch = LossStats.empty(), MismatchStats.empty()
    with packed_mode(model):  # the backward reruns checkpointed layers: it stays inside too
        for row in rows:
            if row.num_targets == 0:  # nothing sampled in it: no loss, no gradient, no forward needed
                continue
            ref = reference_logprobs(model, row, config, reference) if config.loss.beta > 0 else None
            new, entropy = row_logprobs(model, row, config)
            out = row_loss(new, entropy, row, config, normaliser=1.0, ref_logprobs=ref)
            out.loss.backward()
            stats = stats.merge(out.stats)
            if version is not None:
                values = token_deltas(new, row.old_logprobs, row.target_versions == version)
                mismatch = mismatch.merge(deltas_stats(values))
                if deltas is not None:
                    deltas.append(_row_deltas(row, values))
    return stats, mismatch


def _row_deltas(row: PackedRow, values: np.ndarray) -> RowDeltas:
    return RowDeltas(row.sample_indices, row.target_samples.cpu().numpy(), row.target_offsets.cpu().numpy(), values)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rows: list[PackedRow],
    config: StepConfig,
    version: int | None = None,
    deltas: list[RowDeltas] | None = None,
    reference: ReferenceWeights | None = None,
) -> dict[str, float | int | bool | None]:
    """One optimizer step over all rows. Skips the step (and says so) when no token was trained or
    the gradient is not finite, so a bad batch cannot corrupt the adapter or the optimizer state.
    ``version``: the policy version the model's weights are (tokens it sampled measure the mismatch),
    per token into ``deltas`` when given (this rank's rows); ``reference``: the KL term's (learner.reference)."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer.zero_grad(set_to_none=True)
    device = _device(model)
    # distributed: every rank sums over all ranks, so all see the same count, norm and skip decision
    stats, mismatch = accumulate_gradients(model, rows, config, version, deltas, reference)
    stats, mismatch = all_reduce_stats(stats, device), all_reduce_mismatch(mismatch, device)
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
        **mismatch.metrics(),
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

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

ECHO (``[loss] echo_weight`` > 0, rows packed with echo targets): the same forward's hidden states go through
the output layer at the echo targets' predictors too, at temperature 1 (plain NLL of the policy: the
temperature belongs to the sampler's distribution over the policy's own actions, and a tool result was never
sampled, so there is no sampler distribution to match; learner.sft's cross-entropy is at 1 too). Its term is
``echo_weight`` x the mean NLL over every echo target of the step (all rows, all ranks): that count is known
from the packing, before any forward, so each row's term is pre-scaled such that after the division by the
trained-token count it is exactly that mean, computed as if trained = sampled tokens. When the importance mask
drops a share f of the sampled tokens the term weighs 1 / (1 - f) of that (never under ``is_correction =
"truncate"``; f is the step's ``is_masked_fraction``): one gradient buffer cannot hold two normalisers and
GRPO's count is known only after the last forward. A step with echo targets but no trained GRPO token divides
by the sampled count (or 1), which keeps the echo term exact. Weight 0: rows carry no echo target, nothing is
computed, the loss and gradients are those without ECHO bit for bit.

The model is typically a peft ``PeftModel`` with LoRA; only parameters with ``requires_grad`` are
clipped. Its train/eval mode is the caller's: with LoRA dropout 0 (recommended, so the learner's
log-probs are those of the policy the sampler ran) both modes give the same logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

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
from learner.loss import LossConfig, LossOutput, LossStats, echo_loss, grpo_loss
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
    new, entropy, _ = row_forward(model, row, config, echo=False)
    return new, entropy


def row_forward(model: nn.Module, row: PackedRow, config: StepConfig, echo: bool) -> tuple[Tensor, Tensor, Tensor]:
    """One forward of the row: (log-probs [M] and entropies [M] of its GRPO targets, as ``row_logprobs``;
    log-probs [E] of its echo targets at temperature 1, from the same hidden states, empty unless ``echo``)."""
    device = _device(model)
    hidden = hidden_states(model, row.input_ids.to(device), row.position_ids.to(device), row.layout, config.forward)
    head = output_head(causal_lm(model))
    new, entropy = chunked_token_logprobs(
        hidden[row.predictors.to(device)], head, row.targets.to(device), config.temperature, config.forward.chunk_tokens
    )
    if not echo:
        return new, entropy, hidden.new_zeros(0, dtype=torch.float32)
    targets = row.echo_targets.to(device)
    echoed, _ = chunked_token_logprobs(
        hidden[row.echo_predictors.to(device)], head, targets, 1.0, config.forward.chunk_tokens
    )
    return new, entropy, echoed


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
    echo_normaliser: float | None = None,
) -> tuple[LossStats, MismatchStats]:
    """Back-propagate every row's summed loss into .grad (added to what is there); merged stats, and
    the train/inference mismatch on the tokens the learner's ``version`` sampled (none when None),
    per token into ``deltas`` when given (one ``RowDeltas`` per row with a compared token).
    ``reference``: the KL term's reference weights (None: the base model; see learner.reference).
    ``echo_normaliser``: the echo term's (learner.loss.echo_loss; train_step's scale), None: each row's own
    echo targets; echo is computed only for rows packed with echo targets."""
    stats, mismatch = LossStats.empty(), MismatchStats.empty()
    with packed_mode(model):  # the backward reruns checkpointed layers: it stays inside too
        for row in rows:
            if not row.trains:  # nothing sampled, nothing echoed: no loss, no gradient, no forward needed
                continue
            ref = _reference(model, row, config, reference)
            new, entropy, echoed = row_forward(model, row, config, echo=row.num_echo_targets > 0)
            out = row_loss(new, entropy, row, config, normaliser=1.0, ref_logprobs=ref)
            loss, row_stats = out.loss, out.stats
            if row.num_echo_targets:
                term, nll = echo_loss(echoed, config.loss.echo_weight, echo_normaliser)
                loss = loss + term
                row_stats = replace(row_stats, echo_tokens=row.num_echo_targets, echo_nll_sum=nll)
            loss.backward()
            stats = stats.merge(row_stats)
            if version is not None and row.num_targets:
                values = token_deltas(new, row.old_logprobs, row.target_versions == version)
                mismatch = mismatch.merge(deltas_stats(values))
                if deltas is not None:
                    deltas.append(_row_deltas(row, values))
    return stats, mismatch


def _reference(
    model: nn.Module, row: PackedRow, config: StepConfig, reference: ReferenceWeights | None
) -> Tensor | None:
    """The KL term's reference log-probs [M]; None when beta = 0; no forward for a row of echo targets alone."""
    if config.loss.beta <= 0:
        return None
    if row.num_targets == 0:
        return torch.zeros(0, device=_device(model))
    return reference_logprobs(model, row, config, reference)


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
    echo = _echo_normaliser(rows, config, device)
    stats, mismatch = accumulate_gradients(model, rows, config, version, deltas, reference, echo)
    stats, mismatch = all_reduce_stats(stats, device), all_reduce_mismatch(mismatch, device)
    all_reduce_gradients(params)
    grad_norm, stepped = 0.0, False
    if stats.tokens_trained > 0 or stats.echo_tokens > 0:
        _scale_grads(params, 1.0 / (stats.tokens_trained or max(stats.tokens_sampled, 1)))
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


def _echo_normaliser(rows: list[PackedRow], config: StepConfig, device: torch.device) -> float | None:
    """The echo term's normaliser for every row of the step (see the module's docstring): its echo targets over
    its sampled tokens, all ranks, so the division by the trained count leaves a per-token mean. None: no ECHO."""
    if config.loss.echo_weight <= 0:
        return None
    sampled, echoed = sum_over_ranks(
        [sum(row.num_targets for row in rows), sum(row.num_echo_targets for row in rows)], device
    )
    return echoed / max(sampled, 1)


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

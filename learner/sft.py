"""Supervised warm start: cross-entropy on the sampled tokens of successful trajectories.

A model that never succeeds gives GRPO no signal (every group's rewards are equal); imitating the
trajectories that did succeed (a teacher's, or the best of G of the policy's own) gives it a start.
The samples are the store's (``store.samples``): each root-to-leaf path of a rollout's call
graph, tokenized exactly as the policy saw it, with ``loss_mask`` 1 on the tokens a call sampled
(assistant turns) and 0 on prompts, tool outputs and the chat template's framing. Only masked tokens
are trained on, so the model learns to write the answers, never to predict its inputs.

Shapes (one packed row, ``learner.packing``): ``input_ids`` long [L]; ``targets`` long [M], the
trained tokens (M = the masked tokens of the row's samples); ``logprobs`` float32 [M], log p(target |
its sample's earlier tokens). The loss of a step over rows r is

    loss = -sum_r sum_m logprobs_r[m] / sum_r M_r          (mean negative log-likelihood per token)

computed in memory linear in L (packed attention, log-probs from the hidden states in chunks: the same
forward as GRPO's, ``learner.step.row_logprobs``) at temperature 1. Each row back-propagates its sum
divided by the step's token count, so the gradient is exactly that of the mean over all rows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from learner.forward import ForwardConfig, packed_mode
from learner.packing import PackedRow, SampleLike, pack_samples
from learner.step import StepConfig, row_logprobs


@dataclass(frozen=True)
class SftConfig:
    epochs: int = 2  # passes over the samples
    samples_per_step: int = 8  # samples per optimizer step, packed into as few rows as token_budget allows
    token_budget: int = 2048  # tokens per packed row; longer samples are left out (never truncated)
    max_grad_norm: float = 1.0  # <= 0: no clipping
    seed: int = 0  # row order per epoch
    forward: ForwardConfig = ForwardConfig()


@dataclass(frozen=True)
class SftStep:
    step: int
    epoch: int
    loss: float  # mean negative log-likelihood per trained token, nats
    tokens: int  # trained tokens in the step
    grad_norm: float  # before clipping


@dataclass(frozen=True)
class SftResult:
    steps: tuple[SftStep, ...]
    samples: int  # samples trained on
    refused: int  # samples left out: longer than token_budget, or with nothing to train on


def sft_loss(logprobs: Tensor, num_tokens: int) -> Tensor:
    """logprobs float [M] of trained tokens -> their summed negative log-likelihood / num_tokens (scalar)."""
    if num_tokens < 1:
        raise ValueError("an SFT step needs at least one trained token")
    return -logprobs.sum() / num_tokens


def trainable(samples: Sequence[SampleLike]) -> list[SampleLike]:
    """Samples with at least one trained token after the first (nothing predicts a sample's first token)."""
    return [s for s in samples if int(s.loss_mask[1:].sum()) > 0]


def sft_step(
    model, optimizer: torch.optim.Optimizer, rows: Sequence[PackedRow], config: SftConfig
) -> tuple[float, int, float]:
    """One optimizer step on ``rows``: (mean loss per token, trained tokens, gradient norm before clipping)."""
    tokens = sum(row.num_targets for row in rows)
    step_config = StepConfig(temperature=1.0, forward=config.forward)
    total = 0.0
    optimizer.zero_grad(set_to_none=True)
    with packed_mode(model):  # the backward reruns checkpointed layers: it stays inside too
        for row in rows:
            logprobs, _ = row_logprobs(model, row, step_config)
            loss = sft_loss(logprobs, tokens)
            loss.backward()
            total += float(loss.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm if config.max_grad_norm > 0 else math.inf)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return total, tokens, float(norm)


def train_sft(
    model,
    optimizer: torch.optim.Optimizer,
    samples: Sequence[SampleLike],
    config: SftConfig,
    on_step: Callable[[SftStep], None] = lambda step: None,
) -> SftResult:
    """``config.epochs`` passes over ``samples``, shuffled per epoch, ``samples_per_step`` per step.

    A step packs its own samples (tree rows share their prompt prefix), so a small batch of agent
    demonstrations that share a long system prompt still gives many steps, not one row per epoch.
    """
    usable = trainable(samples)
    refused = set(pack_samples(usable, [0.0] * len(usable), config.token_budget).refused)
    fitting = [s for i, s in enumerate(usable) if i not in refused]
    if not fitting:
        raise ValueError(
            f"no sample to train on: {len(samples)} given, {len(samples) - len(usable)} with no "
            f"sampled tokens, {len(refused)} longer than token_budget {config.token_budget}"
        )
    order, steps = random.Random(config.seed), []
    for epoch in range(config.epochs):
        order.shuffle(fitting)
        for batch in batches(fitting, config.samples_per_step):
            rows = pack_samples(batch, [0.0] * len(batch), config.token_budget).rows
            loss, tokens, norm = sft_step(model, optimizer, rows, config)
            steps.append(step := SftStep(len(steps) + 1, epoch, loss, tokens, norm))
            on_step(step)
    return SftResult(tuple(steps), len(fitting), len(samples) - len(fitting))


def batches(items: Sequence[SampleLike], size: int) -> list[Sequence[SampleLike]]:
    """items cut into consecutive batches of ``size`` (the last may be shorter)."""
    if size < 1:
        raise ValueError(f"samples_per_step must be at least 1, got {size}")
    return [items[start : start + size] for start in range(0, len(items), size)]

"""Train/inference mismatch: how far the learner's log-probs of sampled tokens are from the sampler's.

On a token sampled by the very weights the learner holds (its policy version equals the learner's), the
two log-probs would be equal in exact arithmetic; what differs is the engine's numerics (a bfloat16
engine against a float32 learner measured 0.033 nats per token here, a float32 engine 7e-6), a wrong
chat template, or an adapter the engine never applied. Stale tokens (sampled by an older version) are
left out: their difference is the policy's own change, which the importance ratio handles.

For trained tokens t with learner log-prob new_t and sampler log-prob old_t, Δ_t = new_t - old_t:

    mean |Δ|, max |Δ|, k3 = mean(exp(Δ) - 1 - Δ)   (an unbiased, non-negative estimate of
    KL(sampler || learner) from the sampler's own tokens), share of tokens with |Δ| > threshold.

Sums, so micro-batches and ranks merge exactly (``merge``; ``learner.distributed`` across ranks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

THRESHOLD = 0.1  # nats: a token whose log-probs differ by more counts as "over"


@dataclass(frozen=True)
class MismatchStats:
    tokens: int  # fresh trained tokens compared
    abs_sum: float  # sum of |Δ|, nats
    abs_max: float  # max |Δ|, nats (0 when none)
    k3_sum: float  # sum of exp(Δ) - 1 - Δ
    over: int  # tokens with |Δ| > THRESHOLD

    @staticmethod
    def empty() -> MismatchStats:
        return MismatchStats(0, 0.0, 0.0, 0.0, 0)

    def merge(self, other: MismatchStats) -> MismatchStats:
        return MismatchStats(
            self.tokens + other.tokens,
            self.abs_sum + other.abs_sum,
            max(self.abs_max, other.abs_max),
            self.k3_sum + other.k3_sum,
            self.over + other.over,
        )

    def metrics(self) -> dict[str, float | int | None]:
        """Per-token means; None when no fresh token was trained (every one stale, or none at all)."""
        n = self.tokens
        return {
            "mismatch_tokens": n,
            "mismatch_mean_abs": self.abs_sum / n if n else None,
            "mismatch_max_abs": self.abs_max if n else None,
            "mismatch_k3": self.k3_sum / n if n else None,
            "mismatch_frac_over": self.over / n if n else None,
        }


def logprob_mismatch(new_logprobs: Tensor, old_logprobs: Tensor, fresh: Tensor) -> MismatchStats:
    """new_logprobs, old_logprobs float [M] (learner's, sampler's) and fresh bool [M] (sampled by the
    learner's version) -> the stats over the fresh tokens. No gradient flows through it."""
    with torch.no_grad():
        delta = (new_logprobs.detach().double() - old_logprobs.double().to(new_logprobs.device))[
            fresh.to(new_logprobs.device)
        ]
        delta = delta[torch.isfinite(delta)]  # a teacher's token has no sampler log-prob (NaN)
        if delta.numel() == 0:
            return MismatchStats.empty()
        size = delta.abs()
        return MismatchStats(
            int(delta.numel()),
            float(size.sum()),
            float(size.max()),
            float((torch.expm1(delta) - delta).sum()),
            int((size > THRESHOLD).sum()),
        )


def is_alarming(metrics: dict, limit: float) -> bool:
    """Whether a step's mean |Δ| crossed ``limit`` nats (the loop then warns loudly)."""
    value = metrics.get("mismatch_mean_abs")
    return value is not None and math.isfinite(value) and value > limit

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

Per token too: ``token_deltas`` keeps each row's Δ (NaN where not compared) and ``call_deltas`` lays
them over the calls that sampled the tokens, one array per call's output, which the store keeps
(``store.mismatch``) and the viewer draws as a heatmap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from store.mismatch import CallMismatchRecord
from store.samples import Sample

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
    return deltas_stats(token_deltas(new_logprobs, old_logprobs, fresh))


def is_alarming(metrics: dict, limit: float) -> bool:
    """Whether a step's mean |Δ| crossed ``limit`` nats (the loop then warns loudly)."""
    value = metrics.get("mismatch_mean_abs")
    return value is not None and math.isfinite(value) and value > limit


@dataclass(frozen=True)
class RowDeltas:
    """One packed row's per-token Δ, addressed as the row addresses its trained tokens."""

    sample_indices: tuple[int, ...]  # the batch's samples in the row (PackedRow.sample_indices)
    target_samples: np.ndarray  # int64 [M]: k, the entry belongs to sample_indices[k]
    target_offsets: np.ndarray  # int64 [M]: the entry's token index within its sample
    deltas: np.ndarray  # float32 [M]: learner - sampler log-prob, NaN where not compared


def token_deltas(new_logprobs: Tensor, old_logprobs: Tensor, fresh: Tensor) -> np.ndarray:
    """new_logprobs, old_logprobs float [M], fresh bool [M] -> float32 [M]: Δ on fresh tokens with a
    sampler log-prob, NaN elsewhere (stale tokens, a teacher's)."""
    with torch.no_grad():
        delta = new_logprobs.detach().double().cpu() - old_logprobs.double().cpu()
        delta[~fresh.cpu()] = math.nan
    return delta.float().numpy()


def call_deltas(rows: Sequence[RowDeltas], samples: Sequence[Sample]) -> dict[int, np.ndarray]:
    """call id -> float32 [its output length]: each sampled token's Δ (NaN where not compared).

    A call's output sits in every sample through it (``Sample.output_spans``); the first value found
    for a token is kept (a prefix tree forwards shared tokens once). Samples without spans (built
    by hand) attribute nothing."""
    found: dict[int, np.ndarray] = {}
    for row in rows:
        for k, index in enumerate(row.sample_indices):
            sample = samples[index]
            if not sample.output_spans:
                continue
            per_token = np.full(len(sample.input_ids), np.nan, dtype=np.float32)
            mine = row.target_samples == k
            per_token[row.target_offsets[mine]] = row.deltas[mine]
            for call_id, (start, end) in zip(sample.call_ids, sample.output_spans, strict=True):
                _fill(found.setdefault(call_id, np.full(end - start, np.nan, dtype=np.float32)), per_token[start:end])
    return found


def merge_call_deltas(parts: Sequence[dict[int, np.ndarray]]) -> dict[int, np.ndarray]:
    """Several ranks' ``call_deltas`` as one: a call split over ranks keeps the first value per token."""
    merged: dict[int, np.ndarray] = {}
    for part in parts:
        for call_id, values in part.items():
            _fill(merged.setdefault(call_id, np.full(len(values), np.nan, dtype=np.float32)), values)
    return merged


def _fill(into: np.ndarray, values: np.ndarray) -> None:
    empty = np.isnan(into)
    into[empty] = values[empty]


def deltas_stats(deltas: np.ndarray) -> MismatchStats:
    """The summary of one call's compared tokens (NaN entries are not compared)."""
    compared = np.asarray(deltas, dtype=np.float64)
    compared = compared[np.isfinite(compared)]
    if compared.size == 0:
        return MismatchStats.empty()
    size = np.abs(compared)
    return MismatchStats(
        int(compared.size),
        float(size.sum()),
        float(size.max()),
        float((np.expm1(compared) - compared).sum()),
        int((size > THRESHOLD).sum()),
    )


def call_records(per_call: dict[int, np.ndarray], step: int, version: int) -> list[CallMismatchRecord]:
    """What the store keeps of a step's per-call deltas: the calls with a compared token."""
    records = []
    for call_id, deltas in sorted(per_call.items()):
        stats = deltas_stats(deltas)
        if stats.tokens:
            m = stats.metrics()
            records.append(
                CallMismatchRecord(
                    call_id,
                    step,
                    version,
                    stats.tokens,
                    m["mismatch_mean_abs"],
                    m["mismatch_max_abs"],
                    m["mismatch_k3"],
                    m["mismatch_frac_over"],
                    deltas,
                )
            )
    return records

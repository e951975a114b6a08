"""Padding-free packing of variable-length samples into rows under a token budget.

A row concatenates whole samples; ``position_ids`` restart at 0 for each sample and ``cu_seqlens``
marks the boundaries, which is what varlen attention (flash-attention; transformers derives it from
position_ids) needs. Backends without varlen attention take ``block_causal_mask(position_ids)``: each
token sees only the earlier tokens of its own sample, so a packed row's logits equal the per-sample
logits (tested on a real transformers model).

Conventions:
- rows are planned first-fit decreasing: samples sorted by length (longest first, ties by index), each
  put in the first row with room; deterministic for a given input order;
- a sample longer than ``token_budget`` is *refused* (left out and reported), never truncated: cutting
  its start would train its tokens on a context the sampler never saw, so their log-probs and the
  importance ratio would be wrong. Set the budget at least to the engine's max model length;
- the first token of every sample is never trained: nothing in its own sample predicts it, and in a
  packed row the logits before it belong to the previous sample (see learner.loss alignment).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor


class SampleLike(Protocol):
    """What packing reads from a ``gateway.store.samples.Sample``: numpy arrays [T]."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    old_logprobs: np.ndarray


@dataclass(frozen=True)
class PackedRow:
    input_ids: Tensor  # long [L], the samples' tokens concatenated, L <= token_budget
    position_ids: Tensor  # long [L], 0, 1, ... within each sample
    loss_mask: Tensor  # bool [L], the samples' loss masks, False at each sample's first token
    old_logprobs: Tensor  # float32 [L], the sampler's log-probs (0 where not sampled)
    advantages: Tensor  # float32 [L], each sample's advantage repeated over its tokens
    cu_seqlens: Tensor  # int32 [n + 1], sample i occupies [cu_seqlens[i], cu_seqlens[i + 1])
    sample_indices: tuple[int, ...]  # which of the given samples, in row order

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class Packing:
    rows: tuple[PackedRow, ...]
    refused: tuple[int, ...]  # indices of samples not packed: longer than token_budget, or empty

    @property
    def num_tokens(self) -> int:
        return sum(row.num_tokens for row in self.rows)


def plan_rows(lengths: Sequence[int], token_budget: int) -> tuple[list[list[int]], list[int]]:
    """First-fit decreasing: (rows of sample indices, refused indices). Each row sums to <= budget."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    refused = [i for i, n in enumerate(lengths) if n > token_budget or n == 0]
    order = sorted((i for i, n in enumerate(lengths) if 0 < n <= token_budget), key=lambda i: (-lengths[i], i))
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        slot = next((r for r, free in enumerate(room) if free >= lengths[i]), None)
        if slot is None:
            rows.append([])
            room.append(token_budget)
            slot = len(rows) - 1
        rows[slot].append(i)
        room[slot] -= lengths[i]
    return rows, refused


def pack_samples(samples: Sequence[SampleLike], advantages: Sequence[float], token_budget: int) -> Packing:
    """Pack samples (each with its advantage) into rows of at most token_budget tokens."""
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    plan, refused = plan_rows([len(s.input_ids) for s in samples], token_budget)
    rows = tuple(_build_row([samples[i] for i in idx], [advantages[i] for i in idx], tuple(idx)) for idx in plan)
    return Packing(rows, tuple(refused))


def _build_row(samples: list[SampleLike], advantages: list[float], indices: tuple[int, ...]) -> PackedRow:
    lengths = [len(s.input_ids) for s in samples]
    mask = np.concatenate([_trainable_mask(s) for s in samples])
    cu = np.concatenate([[0], np.cumsum(lengths)])
    return PackedRow(
        input_ids=torch.from_numpy(np.concatenate([s.input_ids for s in samples]).astype(np.int64)),
        position_ids=torch.from_numpy(np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)),
        loss_mask=torch.from_numpy(mask),
        old_logprobs=torch.from_numpy(np.concatenate([s.old_logprobs for s in samples]).astype(np.float32)),
        advantages=torch.from_numpy(np.repeat(np.asarray(advantages, np.float32), lengths)),
        cu_seqlens=torch.from_numpy(cu.astype(np.int32)),
        sample_indices=indices,
    )


def _trainable_mask(sample: SampleLike) -> np.ndarray:
    mask = np.asarray(sample.loss_mask).astype(bool)  # copy: the sample's array stays untouched
    mask[:1] = False
    return mask


@dataclass(frozen=True)
class PaddedBatch:
    input_ids: Tensor  # long [B, T], right-padded with pad_id, T = longest sample
    attention_mask: Tensor  # long [B, T], 1 on real tokens, 0 on padding
    loss_mask: Tensor  # bool [B, T], False on padding and on each sample's first token
    old_logprobs: Tensor  # float32 [B, T], 0 on padding
    advantages: Tensor  # float32 [B], one per sample (learner.loss broadcasts it)


def pad_samples(samples: Sequence[SampleLike], advantages: Sequence[float], pad_id: int = 0) -> PaddedBatch:
    """The padded-batch layout of the same samples, for comparison with packing."""
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    width = max((len(s.input_ids) for s in samples), default=0)
    ids = np.full((len(samples), width), pad_id, np.int64)
    attention = np.zeros((len(samples), width), np.int64)
    mask = np.zeros((len(samples), width), bool)
    old = np.zeros((len(samples), width), np.float32)
    for b, s in enumerate(samples):
        n = len(s.input_ids)
        ids[b, :n], attention[b, :n], mask[b, :n], old[b, :n] = s.input_ids, 1, _trainable_mask(s), s.old_logprobs
    return PaddedBatch(
        torch.from_numpy(ids), torch.from_numpy(attention), torch.from_numpy(mask), torch.from_numpy(old),
        torch.tensor(list(advantages), dtype=torch.float32),
    )


def block_causal_mask(position_ids: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Additive attention mask [1, 1, L, L] for one packed row: 0 where query i may see key j (same
    sample, j <= i), the dtype's minimum elsewhere. A new sample starts wherever position_ids is 0.

    position_ids: long [L] or [1, L]. Transformers passes a 4D mask through as-is (eager adds it to the
    scores, sdpa takes it as attn_mask). Memory is L * L * itemsize: use varlen attention for long rows.
    """
    positions = position_ids.reshape(-1)
    segment = torch.cumsum(positions == 0, dim=0)  # [L], sample number of each token
    length = positions.shape[0]
    causal = torch.ones(length, length, dtype=torch.bool, device=positions.device).tril()
    allowed = causal & (segment[:, None] == segment[None, :])
    mask = torch.zeros(length, length, dtype=dtype, device=positions.device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]

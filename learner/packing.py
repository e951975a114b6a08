"""Padding-free packing of variable-length samples into rows under a token budget, flat or as prefix trees.

A row is a sequence of nodes (learner.attention.AttentionLayout). Flat packing puts whole samples side
by side, each attending to itself, positions restarting at 0. Tree packing forwards the prefix that
samples share once (a group's task prompt; the earlier turns of one rollout's paths): each continuation
attends to its ancestors and itself, its positions continue from the prefix, so every token's hidden
state is the one it has when its sample is forwarded alone (tested on real transformers models).

A row carries its loss targets separately from its tokens: one entry per trained token per sample
(``predictors`` [M] says which row position's hidden state predicts it). A shared token trained in
several samples (an earlier turn on two paths of one rollout) is an entry of each, with that sample's
old log-prob and advantage, exactly as if the samples were forwarded one by one.

ECHO's targets (``echo=True``; learner.echo: the tool-result tokens) are carried the same way, separately:
``echo_predictors`` / ``echo_targets`` / ``echo_samples`` [E], one entry per tool token per sample. A tool
token shared by several samples of a tree (an earlier turn's tool result on two paths of one rollout) is an
entry of each, as GRPO's targets are: tree and flat packing then give the same loss, and a tool result
counts as often as the samples that read it. A sample whose advantage is None trains ECHO only (no GRPO
entry: it neither adds to nor dilutes GRPO's per-token mean); a sample without roles has no echo entry.

Conventions:
- units (a tree, or one sample) are planned first-fit decreasing by the tokens they forward; ties by
  first sample index; deterministic for a given input order;
- a unit is a tree only if it saves at least ``min_saved_tokens`` over forwarding its samples alone
  (``tree=False``: always flat); a tree too big for one row is cut into runs of neighbouring samples;
- a sample longer than ``token_budget`` is *refused* (left out and reported), never truncated: cutting
  its start would train its tokens on a context the sampler never saw, so their log-probs and the
  importance ratio would be wrong. The learner defaults the budget to the engine's max model length;
- the first token of every sample is never trained: nothing in its own sample predicts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from learner.attention import AttentionLayout, flat_layout, tree_layout
from learner.echo import echo_mask
from learner.prefix_tree import PrefixTree, build_tree, split_by_budget

MIN_SAVED_TOKENS = 128  # a tree that saves fewer tokens is packed flat (its gathers would cost more)
_NONE = torch.zeros(0, dtype=torch.int64)  # no echo entries (read-only by convention: never written to)


class SampleLike(Protocol):
    """What packing reads from a ``store.samples.Sample``: numpy arrays [T]."""

    input_ids: np.ndarray
    loss_mask: np.ndarray
    old_logprobs: np.ndarray
    policy_versions: np.ndarray  # the version that sampled each token, -1 where none did
    roles: np.ndarray | None  # int8 [T], a store.records.TokenRole per token; None: unknown (no ECHO)


@dataclass(frozen=True)
class PackedRow:
    input_ids: Tensor  # long [L], each node's tokens, L <= token_budget
    position_ids: Tensor  # long [L], each token's position within its sample(s)
    layout: AttentionLayout  # which keys each node attends to
    predictors: Tensor  # long [M], row position of the hidden state that predicts each trained token
    targets: Tensor  # long [M], the trained tokens
    old_logprobs: Tensor  # float32 [M], the sampler's log-probs of them
    advantages: Tensor  # float32 [M], their sample's advantage
    target_samples: Tensor  # long [M], k: the entry belongs to sample_indices[k]
    target_offsets: Tensor  # long [M], the entry's token index within its sample
    target_versions: Tensor  # long [M], the policy version that sampled it
    sample_indices: tuple[int, ...]  # which of the given samples, in row order
    sample_tokens: int  # the samples' tokens counted one by one: what flat packing forwards
    echo_predictors: Tensor = _NONE  # long [E], row position of the hidden state that predicts each echo target
    echo_targets: Tensor = _NONE  # long [E], the tool-result tokens ECHO trains (empty unless packed with echo)
    echo_samples: Tensor = _NONE  # long [E], k: the entry belongs to sample_indices[k]

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[0])

    @property
    def num_echo_targets(self) -> int:
        return int(self.echo_targets.shape[0])

    @property
    def trains(self) -> bool:
        """A GRPO or an echo target: the row has a loss to forward and back-propagate."""
        return self.num_targets > 0 or self.num_echo_targets > 0

    @property
    def is_tree(self) -> bool:
        return self.layout.kv_index is not None


@dataclass(frozen=True)
class Packing:
    rows: tuple[PackedRow, ...]
    refused: tuple[int, ...]  # indices of samples not packed: longer than token_budget, or empty

    @property
    def num_tokens(self) -> int:
        return sum(row.num_tokens for row in self.rows)

    @property
    def saved_tokens(self) -> int:
        """Tokens tree packing did not forward compared with flat packing."""
        return sum(row.sample_tokens - row.num_tokens for row in self.rows)


def plan_rows(lengths: Sequence[int], token_budget: int) -> tuple[list[list[int]], list[int]]:
    """First-fit decreasing: (rows of item indices, refused indices). Each row sums to <= budget."""
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


def pack_samples(
    samples: Sequence[SampleLike],
    advantages: Sequence[float | None],
    token_budget: int,
    tree: bool = True,
    min_saved_tokens: int = MIN_SAVED_TOKENS,
    echo: bool = False,
) -> Packing:
    """Pack samples (each with its advantage) into rows of at most token_budget tokens.

    echo: also carry each sample's echo targets (its tool-result tokens, learner.echo); False: none, and the
    rows are exactly those packed before ECHO. An advantage of None: the sample has no GRPO entry (echo only)."""
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    if token_budget < 1:
        raise ValueError(f"token_budget must be positive, got {token_budget}")
    seqs = [np.asarray(s.input_ids) for s in samples]
    refused = [i for i, s in enumerate(seqs) if len(s) > token_budget or len(s) == 0]
    fits = [i for i, s in enumerate(seqs) if 0 < len(s) <= token_budget]
    units = _units(seqs, fits, token_budget, min_saved_tokens) if tree else [build_tree(seqs, [i]) for i in fits]
    plan, _ = plan_rows([u.unique_tokens for u in units], token_budget)
    rows = tuple(_build_row(samples, advantages, [units[u] for u in row], echo) for row in plan)
    return Packing(rows, tuple(refused))


def _units(seqs: list[np.ndarray], fits: list[int], budget: int, min_saved: int) -> list[PrefixTree]:
    """Trees of samples sharing a prefix (one per distinct first token, cut to the budget), or single
    samples where a tree saves fewer than min_saved tokens."""
    units: list[PrefixTree] = []
    whole = build_tree(seqs, fits)
    for root in (n for n in whole.nodes if n.parent < 0):
        for run in split_by_budget(seqs, build_tree(seqs, root.members), budget):
            unit = build_tree(seqs, run)
            if sum(len(seqs[m]) for m in run) - unit.unique_tokens >= max(min_saved, 1):
                units.append(unit)
            else:
                units.extend(build_tree(seqs, [m]) for m in run)
    return units


def _build_row(
    samples: Sequence[SampleLike], advantages: Sequence[float | None], units: list[PrefixTree], echo: bool
) -> PackedRow:
    ids, positions, ranges, ancestors = [], [], [], []
    paths: dict[int, np.ndarray] = {}  # sample -> row positions of its tokens
    order: list[int] = []
    offset = 0
    for unit in units:
        first_node = len(ranges)
        for n, node in enumerate(unit.nodes):
            owner = samples[node.members[0]].input_ids
            ids.append(np.asarray(owner[node.start : node.end]))
            positions.append(np.arange(node.start, node.end))
            ranges.append((offset, offset + node.length))
            ancestors.append([first_node + a for a in unit.ancestors(n)])
            offset += node.length
        for m in unit.order:
            path = unit.path(m)
            paths[m] = np.concatenate([np.arange(*ranges[first_node + n]) for n in path])
            order.append(m)
    flat = all(not a for a in ancestors)
    layout = flat_layout([e - s for s, e in ranges]) if flat else tree_layout(ranges, ancestors)
    targets = _targets(samples, advantages, order, paths)
    if echo:
        targets.update(_echo_targets(samples, order, paths))
    return PackedRow(
        input_ids=torch.from_numpy(np.concatenate(ids).astype(np.int64)),
        position_ids=torch.from_numpy(np.concatenate(positions).astype(np.int64)),
        layout=layout,
        **targets,
        sample_indices=tuple(order),
        sample_tokens=sum(len(samples[m].input_ids) for m in order),
    )


def _targets(
    samples: Sequence[SampleLike], advantages: Sequence[float | None], order: list[int], paths: dict[int, np.ndarray]
) -> dict[str, Tensor]:
    """One entry per trained token of each sample: predictor position, token, old log-prob, advantage."""
    parts: dict[str, list[np.ndarray]] = {
        k: []
        for k in (
            "predictors", "targets", "old_logprobs", "advantages", "target_samples", "target_offsets", "target_versions"
        )
    }  # fmt: skip
    for k, m in enumerate(order):
        s = samples[m]
        if advantages[m] is None:  # echo only
            continue
        t = np.flatnonzero(_trainable_mask(s))  # token offsets trained, all >= 1
        parts["predictors"].append(paths[m][t - 1])
        parts["targets"].append(np.asarray(s.input_ids)[t])
        parts["old_logprobs"].append(np.asarray(s.old_logprobs)[t])
        parts["advantages"].append(np.full(len(t), advantages[m]))
        parts["target_samples"].append(np.full(len(t), k))
        parts["target_offsets"].append(t)
        parts["target_versions"].append(np.asarray(s.policy_versions)[t])
    return _tensors(parts)


def _echo_targets(samples: Sequence[SampleLike], order: list[int], paths: dict[int, np.ndarray]) -> dict[str, Tensor]:
    """One entry per echo target (tool-result token) of each sample: predictor position, token, sample."""
    parts: dict[str, list[np.ndarray]] = {"echo_predictors": [], "echo_targets": [], "echo_samples": []}
    for k, m in enumerate(order):
        t = np.flatnonzero(echo_mask(samples[m]))  # all >= 1
        parts["echo_predictors"].append(paths[m][t - 1])
        parts["echo_targets"].append(np.asarray(samples[m].input_ids)[t])
        parts["echo_samples"].append(np.full(len(t), k))
    return _tensors(parts)


def _tensors(parts: dict[str, list[np.ndarray]]) -> dict[str, Tensor]:
    dtypes = {"old_logprobs": np.float32, "advantages": np.float32}
    return {
        k: torch.from_numpy(
            np.concatenate(v).astype(dtypes.get(k, np.int64)) if v else np.zeros(0, dtypes.get(k, np.int64))
        )
        for k, v in parts.items()
    }


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
    echo_mask: Tensor  # bool [B, T], the echo targets (learner.echo): tool-result tokens, False on padding


def pad_samples(samples: Sequence[SampleLike], advantages: Sequence[float], pad_id: int = 0) -> PaddedBatch:
    """The padded-batch layout of the same samples, for comparison with packing."""
    if len(samples) != len(advantages):
        raise ValueError(f"{len(samples)} samples but {len(advantages)} advantages")
    width = max((len(s.input_ids) for s in samples), default=0)
    ids = np.full((len(samples), width), pad_id, np.int64)
    attention = np.zeros((len(samples), width), np.int64)
    mask = np.zeros((len(samples), width), bool)
    old = np.zeros((len(samples), width), np.float32)
    echo = np.zeros((len(samples), width), bool)
    for b, s in enumerate(samples):
        n = len(s.input_ids)
        ids[b, :n], attention[b, :n], mask[b, :n], old[b, :n] = s.input_ids, 1, _trainable_mask(s), s.old_logprobs
        echo[b, :n] = echo_mask(s)
    return PaddedBatch(
        torch.from_numpy(ids),
        torch.from_numpy(attention),
        torch.from_numpy(mask),
        torch.from_numpy(old),
        torch.tensor(list(advantages), dtype=torch.float32),
        torch.from_numpy(echo),
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

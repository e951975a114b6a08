"""Attention over packed rows with O(L) memory: each node of a row attends to its ancestors and, causally,
to itself; no L x L mask is ever built.

A packed row (learner.packing) is a sequence of *nodes*, contiguous token ranges in row order. A node
with no ancestors is a whole sample (flat packing) or the shared prefix of a tree; a node with ancestors
is a continuation that sees every token of its ancestors (the shared prefix, laid out earlier in the
row) and the earlier tokens of its own range. ``AttentionLayout`` says it in varlen terms:

- node n's queries are row positions ``[cu_q[n], cu_q[n + 1])``;
- its keys and values are row positions ``kv_index[cu_k[n]:cu_k[n + 1]]``: its ancestors' tokens,
  then its own; so key count >= query count and the causal mask is aligned bottom-right (query i of
  the node sees every key up to the ancestors' length + i).

Kernels (``packed_attention``, registered with transformers as ``PACKED_ATTENTION``):
- ``flash``: flash-attention's ``flash_attn_varlen_func`` with cu_q / cu_k (bottom-right causal), on
  CUDA when the ``flash_attn`` package is installed (bf16 / fp16; other dtypes take sdpa);
- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` once per node (``is_causal`` for
  nodes without ancestors, a bottom-right boolean mask of at most ``SDPA_QUERY_CHUNK`` query rows for
  the others). PyTorch's fused CPU kernel keeps it O(L) (measured: an 8k causal segment, forward and
  backward, peaked at 168 MB, 16k at 312 MB; a 1k x 9k masked block at 164 MB). float64 (tests'
  exact comparisons) takes PyTorch's math kernel, since the fused one accumulates in float32.

The transformers model passes ``packed_layout=...`` (a forward keyword) down to this function; the
mask machinery is skipped for a registered implementation it does not know, so no mask is built.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from learner.step_settings import KERNELS

PACKED_ATTENTION = "harnessrl_packed"
SDPA_QUERY_CHUNK = 4096  # query rows per masked SDPA call: the mask is at most 4096 x keys booleans


@dataclass(frozen=True)
class AttentionLayout:
    cu_q: Tensor  # int32 [n + 1]: node n's queries are row positions [cu_q[n], cu_q[n + 1])
    kv_index: Tensor | None  # long [K]: row positions of every node's keys, node after node; None: kv = q
    cu_k: Tensor  # int32 [n + 1]: node n's keys are kv_index[cu_k[n]:cu_k[n + 1]]
    max_q: int  # the longest node (queries), for flash varlen
    max_k: int  # the most keys of one node
    kernel: str = "sdpa"  # "sdpa" or "flash" (resolve_kernel)

    @property
    def num_nodes(self) -> int:
        return int(self.cu_q.shape[0]) - 1

    def to(self, device: torch.device, kernel: str) -> AttentionLayout:
        index = None if self.kv_index is None else self.kv_index.to(device)
        return AttentionLayout(self.cu_q.to(device), index, self.cu_k.to(device), self.max_q, self.max_k, kernel)


def flat_layout(lengths: list[int]) -> AttentionLayout:
    """Samples side by side, each attending to itself only: keys are the queries."""
    cu = torch.tensor([0, *torch.tensor(lengths, dtype=torch.long).cumsum(0).tolist()], dtype=torch.int32)
    longest = max(lengths, default=0)
    return AttentionLayout(cu, None, cu, longest, longest)


def tree_layout(ranges: list[tuple[int, int]], ancestors: list[list[int]]) -> AttentionLayout:
    """Nodes as (start, end) row ranges in row order, each with its ancestor nodes (root first)."""
    index: list[Tensor] = []
    cu_k = [0]
    for node, (start, end) in enumerate(ranges):
        parts = [torch.arange(*ranges[a]) for a in ancestors[node]] + [torch.arange(start, end)]
        index.extend(parts)
        cu_k.append(cu_k[-1] + sum(len(p) for p in parts))
    cu_q = torch.tensor([0] + [end for _, end in ranges], dtype=torch.int32)
    if any(ranges[n][0] != cu_q[n] for n in range(len(ranges))):
        raise ValueError("tree nodes must cover the row in order")
    kv = torch.cat(index) if index else torch.zeros(0, dtype=torch.long)
    widths = [int(cu_k[n + 1] - cu_k[n]) for n in range(len(ranges))]
    return AttentionLayout(
        cu_q,
        kv,
        torch.tensor(cu_k, dtype=torch.int32),
        max((e - s for s, e in ranges), default=0),
        max(widths, default=0),
    )


def resolve_kernel(requested: str, device: torch.device) -> str:
    """ "auto": flash varlen on CUDA when flash_attn is installed, SDPA otherwise."""
    if requested not in KERNELS:
        raise ValueError(f"attention kernel must be one of {', '.join(KERNELS)}, got {requested!r}")
    has_flash = device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None
    if requested == "flash" and not has_flash:
        raise RuntimeError(
            "attn_implementation = 'flash' needs a CUDA device and the flash_attn package "
            "(pip install flash-attn --no-build-isolation); or use 'auto' / 'sdpa'"
        )
    if requested == "auto":
        return "flash" if has_flash else "sdpa"
    return requested


def packed_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    packed_layout: AttentionLayout | None = None,
    **kwargs: object,
) -> tuple[Tensor, None]:
    """The transformers attention interface: query [1, H, L, D], key/value [1, Hkv, L, D] (RoPE applied)
    -> ([1, L, H, D], None). Needs ``packed_layout`` (a forward keyword) and batch size 1."""
    if packed_layout is None:
        raise ValueError(f"{PACKED_ATTENTION} attention needs packed_layout= (learner.forward builds it)")
    if query.shape[0] != 1 or attention_mask is not None or kwargs.get("sliding_window"):
        raise ValueError("packed attention takes one packed row (batch 1), no mask, no sliding window")
    if dropout:
        raise ValueError("attention dropout must be 0: the learner's log-probs must be the sampler's policy")
    if packed_layout.kernel == "flash" and query.dtype in (torch.float16, torch.bfloat16):
        return _flash(query, key, value, packed_layout, scaling), None
    if query.dtype == torch.float64:  # the fused CPU kernel accumulates in float32: exact checks use math
        with sdpa_kernel([SDPBackend.MATH]):
            return _sdpa(query, key, value, packed_layout, scaling), None
    return _sdpa(query, key, value, packed_layout, scaling), None


def _sdpa(query: Tensor, key: Tensor, value: Tensor, layout: AttentionLayout, scaling: float | None) -> Tensor:
    gqa = query.shape[1] != key.shape[1]  # grouped-query attention: SDPA expands the kv heads itself
    cu_q, cu_k = layout.cu_q.tolist(), layout.cu_k.tolist()
    outputs = []
    for n in range(layout.num_nodes):
        q = query[:, :, cu_q[n] : cu_q[n + 1]]
        if cu_k[n + 1] - cu_k[n] == q.shape[2]:  # no ancestors: its keys are its own positions
            k, v = key[:, :, cu_q[n] : cu_q[n + 1]], value[:, :, cu_q[n] : cu_q[n + 1]]
            outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, enable_gqa=gqa))
            continue
        index = layout.kv_index[cu_k[n] : cu_k[n + 1]]
        k, v = key[:, :, index], value[:, :, index]
        if gqa and q.is_cuda:  # CUDA's masked kernel (memory-efficient) takes no GQA: expand the kv heads
            k, v = (t.repeat_interleave(query.shape[1] // key.shape[1], dim=1) for t in (k, v))
        outputs.append(_bottom_right(q, k, v, scaling, gqa and not q.is_cuda))
    out = torch.cat(outputs, dim=2) if outputs else query
    return out.transpose(1, 2)


def _bottom_right(q: Tensor, k: Tensor, v: Tensor, scaling: float | None, gqa: bool) -> Tensor:
    """Causal attention of q [1, H, Q, D] against k/v [1, H, K, D], K >= Q: query i sees keys <= K - Q + i.
    Queries go in chunks so the boolean mask stays SDPA_QUERY_CHUNK x K."""
    num_q, num_k = q.shape[2], k.shape[2]
    offset = num_k - num_q
    outputs = []
    for start in range(0, num_q, SDPA_QUERY_CHUNK):
        end = min(num_q, start + SDPA_QUERY_CHUNK)
        visible = offset + end  # keys beyond the chunk's last query are never seen: leave them out
        rows = torch.arange(start, end, device=q.device)[:, None]
        mask = torch.arange(visible, device=q.device)[None] <= rows + offset
        outputs.append(
            F.scaled_dot_product_attention(
                q[:, :, start:end], k[:, :, :visible], v[:, :, :visible], attn_mask=mask, scale=scaling, enable_gqa=gqa
            )
        )
    return torch.cat(outputs, dim=2)


def _flash(query: Tensor, key: Tensor, value: Tensor, layout: AttentionLayout, scaling: float | None) -> Tensor:
    from flash_attn import flash_attn_varlen_func

    q = query[0].transpose(0, 1)  # [L, H, D]
    k, v = key[0].transpose(0, 1), value[0].transpose(0, 1)  # [L, Hkv, D]
    if layout.kv_index is not None:
        k, v = k[layout.kv_index], v[layout.kv_index]
    out = flash_attn_varlen_func(
        q, k, v, layout.cu_q, layout.cu_k, layout.max_q, layout.max_k, dropout_p=0.0, softmax_scale=scaling, causal=True
    )
    return out[None]  # [1, L, H, D]


def register() -> None:
    """Make PACKED_ATTENTION known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)

"""Builders for the learner tests: the tiny model (``learner.tiny_model``) with LoRA, samples, and
the learner's previous path as a reference (dense block mask, full [L, V] logits), which the
memory-linear path must match."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from learner.loss import LossConfig, LossStats, grpo_loss, token_entropy, token_logprobs
from learner.packing import block_causal_mask
from learner.tiny_model import ATTENTION_PROJECTIONS, VOCAB, tiny_base, tiny_lora
from store.samples import Sample


def lora_model(
    seed: int = 0,
    kind: str = "qwen2",
    dtype: torch.dtype = torch.float32,
    targets: tuple[str, ...] = ATTENTION_PROJECTIONS,
    moved: bool = False,
) -> torch.nn.Module:
    """A tiny model with LoRA; moved: LoRA's B drawn at random (it starts at 0) so the adapter matters."""
    return tiny_lora(tiny_base(kind, seed=seed).to(dtype), targets=targets, moved=moved, seed=seed + 1)


def own_logprobs(model: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        ids_t = torch.from_numpy(np.asarray(ids, np.int64))[None]
        return token_logprobs(model(input_ids=ids_t).logits, ids_t)[0].double().numpy()


def sample_of(ids: np.ndarray, mask: np.ndarray, old: np.ndarray) -> Sample:
    mask = np.asarray(mask, np.int8)
    return Sample(
        (0,),
        np.asarray(ids, np.int32),
        mask,
        np.where(mask == 1, old, 0).astype(np.float32),
        np.where(mask == 1, 0, -1).astype(np.int32),
    )


def on_policy_samples(model, seed, n=5, low=6, high=14, noise=0.0):
    """Samples whose old log-probs are the model's own (+ noise), so every ratio starts near 1."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        length = int(rng.integers(low, high))
        ids = rng.integers(0, VOCAB, length)
        mask = np.zeros(length, np.int8)
        mask[int(rng.integers(1, length - 1)) :] = 1
        samples.append(sample_of(ids, mask, own_logprobs(model, ids) + rng.normal(0.0, noise, length)))
    return samples


def group_samples(model, seed, n=4, prefix=20, low=3, high=12, noise=0.3, prompt_trained=0):
    """n samples sharing a ``prefix``-token prompt (its last ``prompt_trained`` tokens sampled), then
    their own continuations, sampled; old log-probs are the model's own + noise."""
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, VOCAB, prefix)
    samples = []
    for _ in range(n):
        tail = rng.integers(0, VOCAB, int(rng.integers(low, high)))
        ids = np.concatenate([shared, tail])
        mask = np.zeros(len(ids), np.int8)
        mask[prefix - prompt_trained :] = 1
        samples.append(sample_of(ids, mask, own_logprobs(model, ids) + rng.normal(0.0, noise, len(ids))))
    return samples


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def adapter(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def previous_path_row(samples, advantages):
    """The learner's previous packed row: samples concatenated, positions restarting, [L]-aligned tensors."""
    lengths = [len(s.input_ids) for s in samples]
    mask = np.concatenate([np.r_[False, np.asarray(s.loss_mask[1:]).astype(bool)] for s in samples])
    return (
        torch.from_numpy(np.concatenate([s.input_ids for s in samples]).astype(np.int64)),
        torch.from_numpy(np.concatenate([np.arange(n) for n in lengths])),
        torch.from_numpy(mask),
        torch.from_numpy(np.concatenate([s.old_logprobs for s in samples]).astype(np.float64)),
        torch.from_numpy(np.repeat(np.asarray(advantages, np.float64), lengths)),
    )


def full_precision_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """learner.loss.token_logprobs in the logits' own dtype (it computes in float32): [B, T], 0 at t = 0."""
    scaled = logits[:, :-1] / temperature
    picked = scaled.gather(-1, input_ids[:, 1:, None])[..., 0] - torch.logsumexp(scaled, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0))


def previous_path_backward(
    model, samples, advantages, config: LossConfig | None = None, temperature: float = 1.0
) -> tuple[LossStats, torch.Tensor]:
    """The previous path on one row of all the samples: dense block mask, full logits, loss summed;
    gradients left in .grad. Returns the stats and the per-token log-probs [L]."""
    ids, positions, mask, old, adv = previous_path_row(samples, advantages)
    dtype = next(model.parameters()).dtype
    # its default attention (sdpa with the 4D mask), on the math kernel: float64 end to end
    # (eager's softmax runs in float32)
    configs = {id(m.config): m.config for m in model.modules() if hasattr(m, "config")}.values()
    before = [c._attn_implementation for c in configs]
    for c in configs:
        c._attn_implementation = "sdpa"
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            logits = model(
                input_ids=ids[None],
                position_ids=positions[None],
                attention_mask=block_causal_mask(positions, dtype=dtype),
            ).logits
    finally:
        for c, name in zip(configs, before, strict=True):
            c._attn_implementation = name
    new = full_precision_logprobs(logits, ids[None], temperature)
    with torch.no_grad():
        entropy = token_entropy(logits.detach(), temperature)
    out = grpo_loss(new, old[None].to(new.dtype), adv[None], mask[None], config or LossConfig(), 1.0, entropy=entropy)
    out.loss.backward()
    return out.stats, new[0].detach()

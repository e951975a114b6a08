"""The policy's log-probs of a packed row's trained tokens, in memory linear in the row's length.

Three things keep a long row small:
- packed attention (learner.attention): no L x L mask, each node attends to its ancestors and itself;
- log-probs from the final hidden states, never the row's [L, V] logits: only the positions that
  predict a trained token go through the output layer, ``chunk_tokens`` at a time, and each chunk's
  logits are recomputed in the backward (``chunked_token_logprobs``);
- activation checkpointing of the decoder layers for rows of at least ``checkpoint_min_tokens``: a
  layer keeps only its input and recomputes the rest in the backward.

The output layer is the model's own (``get_output_embeddings()``, LoRA-wrapped if targeted), then the
final logit soft-capping where the config has one, then the sampler's temperature: the same logits
``model(...).logits`` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from learner.attention import (
    PACKED_ATTENTION,
    AttentionLayout,
    register,
    resolve_kernel,
)
from learner.step_settings import DEFAULT_CHUNK_TOKENS, ForwardConfig


def chunked_token_logprobs(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    targets: Tensor,
    temperature: float = 1.0,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> tuple[Tensor, Tensor]:
    """Log-prob and entropy of each target under the logits ``head(hidden) / temperature``.

    hidden: float [M, H], the hidden state that predicts each target (already gathered).
    head: maps [C, H] -> [C, V] logits (the output layer, soft-capping included).
    targets: long [M], the token each hidden state predicts.
    Returns (logprobs [M], float32 or the model's wider dtype, differentiable in hidden and head; entropy [M],
    nats, no gradient). At most chunk_tokens x V logits exist at once, forward or backward: each chunk
    is checkpointed, so its logits are recomputed when its gradient is needed.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_tokens):
        part, want = hidden[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        if torch.is_grad_enabled() and (part.requires_grad or _has_trainable(head)):
            lp, ent = checkpoint(_chunk_stats, part, head, want, temperature, use_reentrant=False)
        else:
            lp, ent = _chunk_stats(part, head, want, temperature)
        logprobs.append(lp)
        entropies.append(ent)
    if not logprobs:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logprobs), torch.cat(entropies)


def _chunk_stats(
    hidden: Tensor, head: Callable[[Tensor], Tensor], targets: Tensor, temperature: float
) -> tuple[Tensor, Tensor]:
    logits = head(hidden)
    scaled = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # [C, V], >= float32
    log_norm = torch.logsumexp(scaled, dim=-1)
    picked = scaled.gather(-1, targets[:, None]).squeeze(-1) - log_norm
    with torch.no_grad():
        log_p = scaled.detach() - log_norm.detach()[:, None]
        # xlogy on probabilities: 0 * log 0 = 0, so a -inf logit (a banned token) gives no NaN
        probs = log_p.exp()
        entropy = -torch.special.xlogy(probs, probs).sum(-1)
    return picked, entropy


def _has_trainable(head: Callable[[Tensor], Tensor]) -> bool:
    return isinstance(head, nn.Module) and any(p.requires_grad for p in head.parameters())


def causal_lm(model: nn.Module) -> nn.Module:
    """The transformers causal LM inside a peft model (or DDP wrapper), LoRA layers injected in place."""
    model = getattr(model, "module", model)  # DDP
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def output_head(lm: nn.Module) -> Callable[[Tensor], Tensor]:
    """hidden [C, H] -> logits [C, V] as the model's forward computes them."""
    head = lm.get_output_embeddings()
    cap = getattr(lm.config, "final_logit_softcapping", None)
    if not cap:
        return head
    return lambda h: torch.tanh(head(h) / cap) * cap


def hidden_states(
    model: nn.Module, input_ids: Tensor, position_ids: Tensor, layout: AttentionLayout, config: ForwardConfig
) -> Tensor:
    """Final hidden states [L, H] of one packed row (after the final norm). Call inside ``packed_mode``,
    and back-propagate inside it too: checkpointed layers rerun the attention in the backward."""
    lm = causal_lm(model)
    if lm.config._attn_implementation != PACKED_ATTENTION:
        raise RuntimeError("hidden_states runs inside learner.forward.packed_mode(model, ...)")
    device = input_ids.device
    _set_checkpointing(lm, config.activation_checkpointing and input_ids.shape[0] >= config.checkpoint_min_tokens)
    layout = layout.to(device, resolve_kernel(config.kernel, device))
    out = lm.get_decoder()(
        input_ids=input_ids[None], position_ids=position_ids[None], use_cache=False, packed_layout=layout
    )
    return out.last_hidden_state[0]


@contextmanager
def packed_mode(model: nn.Module) -> Iterator[None]:
    """The model's attention is learner.attention's while inside (its mask machinery then builds no mask);
    on exit the attention implementation and the layers' checkpointing flags are as they were."""
    register()
    lm = causal_lm(model)
    configs = list({id(m.config): m.config for m in lm.modules() if hasattr(m, "config")}.values())
    before = [c._attn_implementation for c in configs]
    flags = [(m, m.gradient_checkpointing) for m in _checkpointing_layers(lm)]
    for c in configs:
        c._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        for c, name in zip(configs, before, strict=True):
            c._attn_implementation = name
        for layer, flag in flags:
            layer.gradient_checkpointing = flag


def _checkpointing_layers(lm: nn.Module) -> list[nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in lm.modules() if isinstance(m, GradientCheckpointingLayer)]


def _set_checkpointing(lm: nn.Module, enabled: bool) -> None:
    """Recompute decoder-layer activations in the backward for this row (transformers' layers)."""
    for layer in _checkpointing_layers(lm):
        layer._gradient_checkpointing_func = _checkpoint_layer  # what gradient_checkpointing_enable sets
        layer.gradient_checkpointing = enabled


def _checkpoint_layer(function: Callable[..., object], *args: object) -> object:
    return checkpoint(function, *args, use_reentrant=False)

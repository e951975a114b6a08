"""The learner's side of an adapter's proof (``contracts.adapter_proof``): its log-probs of a probe.

At each publication the learner takes a short token sequence and, after each of its last few prefixes,
the token the adapter it publishes finds likeliest next, with that token's log-prob under the adapter
and under the base model (the adapter disabled). The gateway asks each engine for the same log-probs
under the new adapter's name; an engine that does not apply the adapter answers the base model's, and
the publication fails.

The probe is the tail of a sample the learner trained on (where the adapter moved the model most),
or, before any, a fixed pseudo-random sequence (``fallback_probe_ids``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np
import torch

from contracts.adapter_proof import AdapterProbe

PROBE_TOKENS = 128  # ids in a probe sequence
PROBE_CHECKS = 16  # prefixes checked: one sampled token each, per engine and publication
FALLBACK_SEED = 20261204
MIN_LOGPROB = -1000.0  # a token the model finds impossible is clamped here (the wire wants finite numbers)
# each model's base-model log-probs by probe (``_base_logprobs``)
_BASE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def probe_ids_from(input_ids: Sequence[int] | np.ndarray, length: int = PROBE_TOKENS) -> tuple[int, ...]:
    """The last ``length`` ids of a trained sample."""
    ids = np.asarray(input_ids, dtype=np.int64)[-length:]
    return tuple(int(i) for i in ids)


def fallback_probe_ids(vocab_size: int, length: int = PROBE_TOKENS) -> tuple[int, ...]:
    """A fixed pseudo-random sequence (the same for every run of a vocabulary)."""
    rng = np.random.default_rng(FALLBACK_SEED)
    return tuple(int(i) for i in rng.integers(0, vocab_size, size=length))


def adapter_probe(model, token_ids: Sequence[int], checks: int = PROBE_CHECKS) -> AdapterProbe:
    """A peft ``model``'s probe on ``token_ids``: after each of the last ``checks`` prefixes, its likeliest
    next token under the adapter and that token's log-prob with the adapter and without (temperature 1,
    no gradient; the model's train/eval mode is restored)."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
    n = len(token_ids)
    prefixes = tuple(range(max(1, n - checks + 1), n + 1))  # the logits after the last len(prefixes) tokens
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            adapted = _logprobs(model, ids, len(prefixes))
            base = _base_logprobs(model, ids, len(prefixes))
    finally:
        model.train(training)
    targets = adapted.argmax(dim=-1)
    rows = torch.arange(len(prefixes), device=device)
    chosen = lambda table: table[rows, targets].clamp(MIN_LOGPROB, 0.0).tolist()  # noqa: E731
    dtype = str(getattr(model, "dtype", torch.float32)).removeprefix("torch.")
    return AdapterProbe(
        tuple(int(i) for i in token_ids), prefixes, tuple(int(t) for t in targets.tolist()), tuple(chosen(adapted)),
        tuple(chosen(base)), dtype,
    )  # fmt: skip


def _logprobs(model, ids: torch.Tensor, kept: int) -> torch.Tensor:
    """Log-probs [kept, V] after each of the last ``kept`` tokens (the output head runs on those alone)."""
    return torch.log_softmax(model(input_ids=ids, logits_to_keep=kept).logits[0].float(), dim=-1)


def _base_logprobs(model, ids: torch.Tensor, kept: int) -> torch.Tensor:
    """The base model's ``_logprobs``, computed once per probe: LoRA never trains the base model's weights,
    so every publication of a process (one probe per policy) finds the same table."""
    key = (tuple(ids[0].tolist()), kept, str(ids.device), str(getattr(model, "dtype", "")))
    cached = _BASE.setdefault(model, {})
    if key not in cached:
        with model.disable_adapter():
            cached[key] = _logprobs(model, ids, kept)
    return cached[key]

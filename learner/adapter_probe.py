"""The learner's side of an adapter's proof (``gateway.adapter_proof``): its log-probs of a probe.

At each publication the learner computes, for a short token sequence, the log-prob of every token
after the first under the adapter it publishes and under the base model (the adapter disabled). The
gateway asks each engine for the same numbers under the new adapter's name; an engine that does not
apply the adapter answers the base model's, and the publication fails.

The probe is the tail of a sample the learner trained on (where the adapter moved the model most),
or, before any, a fixed pseudo-random sequence (``fallback_probe_ids``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gateway.adapter_proof import AdapterProbe

PROBE_TOKENS = 128  # ids in a probe: one short prefill per engine and publication
FALLBACK_SEED = 20261204
MIN_LOGPROB = -1000.0  # a token the model finds impossible is clamped here (the wire wants finite numbers)


def probe_ids_from(input_ids: Sequence[int] | np.ndarray, length: int = PROBE_TOKENS) -> tuple[int, ...]:
    """The last ``length`` ids of a trained sample."""
    ids = np.asarray(input_ids, dtype=np.int64)[-length:]
    return tuple(int(i) for i in ids)


def fallback_probe_ids(vocab_size: int, length: int = PROBE_TOKENS) -> tuple[int, ...]:
    """A fixed pseudo-random sequence (the same for every run of a vocabulary)."""
    rng = np.random.default_rng(FALLBACK_SEED)
    return tuple(int(i) for i in rng.integers(0, vocab_size, size=length))


def token_logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    """ids long [1, n] -> float32 [n-1]: log p(ids[0, i] | ids[0, :i]) for i = 1..n-1 (temperature 1)."""
    logits = model(input_ids=ids).logits[0, :-1].float()
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
    return chosen.clamp(MIN_LOGPROB, 0.0)


def adapter_probe(model, token_ids: Sequence[int]) -> AdapterProbe:
    """A peft ``model``'s log-probs of ``token_ids`` with its adapter and without (no gradient; the
    model's train/eval mode is restored)."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], dtype=torch.long, device=device)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            adapted = token_logprobs(model, ids)
            with model.disable_adapter():
                base = token_logprobs(model, ids)
    finally:
        model.train(training)
    dtype = str(getattr(model, "dtype", torch.float32)).removeprefix("torch.")
    return AdapterProbe(tuple(int(i) for i in token_ids), tuple(adapted.tolist()), tuple(base.tolist()), dtype)

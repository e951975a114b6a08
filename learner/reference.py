"""The KL term's reference policy: the base model, or the adapter a warm-started learner began from.

GRPO's KL penalty (``LossConfig.beta``) keeps the policy near a reference. From a fresh LoRA the
reference is the base model, which costs nothing to hold: peft disables the adapter for the forward.
After a warm start (``LoraSettings.init_adapter``, e.g. `harnessrl sft`'s adapter) the base model is the
policy the warm start was there to leave, so the reference is the starting adapter itself: a frozen copy
of its trainable weights (LoRA only, a few MB) swapped in for the reference forward. A resumed run keeps
the same reference: the copy is taken from the start adapter before any checkpoint is loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ReferenceWeights:
    """A frozen copy of every trainable parameter, in ``model.parameters()`` order."""

    tensors: tuple[Tensor, ...]


def snapshot(model: nn.Module) -> ReferenceWeights:
    """The model's trainable weights as they are now (the warm start's adapter, before any step)."""
    with torch.no_grad():
        return ReferenceWeights(tuple(p.detach().clone() for p in _trainable(model)))


@contextmanager
def reference_policy(model: nn.Module, weights: ReferenceWeights | None) -> Iterator[None]:
    """Inside, ``model`` computes the reference policy: with ``weights`` swapped in for its trainable
    parameters (storage pointers only: no copy), or with the LoRA adapter disabled when ``weights`` is
    None. Use under ``torch.no_grad()``; the trained weights are back on exit, whatever happens."""
    if weights is None:
        peft_model = getattr(model, "module", model)  # unwrap DDP
        if not hasattr(peft_model, "disable_adapter"):
            raise TypeError("beta > 0 needs a peft model: the reference is the base model with the adapter disabled")
        with peft_model.disable_adapter():
            yield
        return
    params = _trainable(model)
    if len(params) != len(weights.tensors):
        raise ValueError(f"the reference holds {len(weights.tensors)} tensors, the model trains {len(params)}")
    live = [p.data for p in params]
    try:
        for param, frozen in zip(params, weights.tensors):
            param.data = frozen
        yield
    finally:
        for param, data in zip(params, live):
            param.data = data


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]

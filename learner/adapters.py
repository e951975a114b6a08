"""Named LoRA adapters over one base model: one per policy, stepped in turn (never mixed in a batch).

peft holds every adapter in the same ``PeftModel`` (``add_adapter``); ``set_adapter`` makes one the
active adapter, the only one the forward applies and the only one with ``requires_grad``, so a step of
policy P computes exactly what P's model alone computes. Alone, the learner's one adapter is peft's
``"default"``; beside others each policy's adapter has a name of its own (``p0``, ``p1``, ...).

Saved adapters (checkpoints, published versions) hold one adapter at the folder's root with peft's
un-named keys, whichever name it has here: the same files as a lone learner's, which the engine loads
and ``learner.checkpoint.load_checkpoint`` restores into any named adapter.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

DEFAULT = "default"


def adapter_parameters(model: Any, name: str) -> list[torch.nn.Parameter]:
    """The weights of adapter ``name`` (``...lora_A.<name>.weight``), in the model's parameter order,
    which a lone learner's optimizer also uses: its state dict loads either way."""
    return [p for key, p in model.named_parameters() if name in key.split(".") and "lora_" in key]


def add_adapter(base_or_model: Any, name: str, lora: Any, seed: int) -> Any:
    """``base_or_model`` with a fresh adapter ``name``: a PeftModel made of a bare base model, or the
    adapter added beside the others. Torch's generator is reseeded first, so each adapter starts where
    a lone learner with ``seed`` starts, whatever was drawn before."""
    from peft import PeftModel, get_peft_model

    torch.manual_seed(seed)
    if isinstance(base_or_model, PeftModel):
        base_or_model.add_adapter(name, lora)
        return base_or_model
    model = get_peft_model(base_or_model, lora, adapter_name=name)
    model.train()  # with lora_dropout 0 (the default) train and eval modes give the same logits
    return model


def load_adapter(base_or_model: Any, name: str, folder: str, seed: int) -> Any:
    """``base_or_model`` with the saved adapter at ``folder`` (a warm start's) loaded as adapter ``name``,
    trainable: a PeftModel made of a bare base model, or the adapter loaded beside the others."""
    from peft import PeftModel

    torch.manual_seed(seed)  # as a lone learner seeds before its warm start
    if isinstance(base_or_model, PeftModel):
        base_or_model.load_adapter(folder, adapter_name=name, is_trainable=True)
        return base_or_model
    model = PeftModel.from_pretrained(base_or_model, folder, adapter_name=name, is_trainable=True)
    model.train()
    return model


def activate(model: Any, name: str) -> None:
    """Make ``name`` the adapter the forward applies and the only trainable one (a no-op when it is)."""
    if getattr(model, "active_adapter", DEFAULT) != name:
        model.set_adapter(name)


def save_adapter(model: Any, folder: Path) -> None:
    """Save the active adapter's config and weights at ``folder``'s root (peft puts a named adapter in a
    sub-folder of its name: it is moved up, so every saved adapter looks like a lone learner's)."""
    name = getattr(model, "active_adapter", DEFAULT)
    if name == DEFAULT:
        model.save_pretrained(folder)
        return
    model.save_pretrained(folder, selected_adapters=[name])
    nested = Path(folder) / name
    for item in nested.iterdir():
        shutil.move(str(item), Path(folder) / item.name)
    nested.rmdir()

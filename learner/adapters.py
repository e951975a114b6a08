"""Named LoRA adapters over one base model: one per policy, stepped in turn (never mixed in a batch).

peft holds every adapter in the same ``PeftModel`` (``add_adapter``); ``set_adapter`` makes one the
active adapter, the only one the forward applies and the only one with ``requires_grad``, so a step of
policy P computes exactly what P's model alone computes. Alone, the learner's one adapter is peft's
``"default"``; beside others each policy's adapter has a name of its own (``p0``, ``p1``, ...).

Saved adapters (checkpoints, published versions) hold one adapter at the folder's root with peft's
un-named keys, whichever name it has here: the same files as a lone learner's, which the engine loads
and ``learner.checkpoint.load_checkpoint`` restores into any named adapter.

Saving writes those two files itself (``adapter_model.safetensors``, ``adapter_config.json``), not through
peft's ``save_pretrained``: that one walks the whole model several times, renders a README model card and
rereads the base model's config on every save (2.5x the time, SmolLM2-135M's r16 adapter; docs/benchmarks.md). An
adapter is written once per set of weights: a publishing step saves its checkpoint, then the version it
publishes, with the same weights; the second save finds them in the first's file (``remember_saved``,
compared tensor by tensor) and hard-links it instead of serializing the weights again.
"""

from __future__ import annotations

import copy
import os
import shutil
import weakref
from pathlib import Path
from typing import Any

import torch

DEFAULT = "default"
WEIGHTS = "adapter_model.safetensors"
# the folder each model's adapters were last saved at, by adapter name: a save of the same weights links it
_SAVED: weakref.WeakKeyDictionary[Any, dict[str, Path]] = weakref.WeakKeyDictionary()


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
    """Save the active adapter's config and weights at ``folder``'s root; weights the adapter last saved
    (``remember_saved``) and still holds are hard-linked from there (copied across file systems)."""
    folder, name = Path(folder), getattr(model, "active_adapter", DEFAULT)
    config = model.peft_config[name]
    if not _plain(config):
        _save_pretrained(model, folder, name)
        return
    folder.mkdir(parents=True, exist_ok=True)
    weights = adapter_weights(model, name)
    (folder / WEIGHTS).unlink(missing_ok=True)  # a link's other name (a proven version) is never written through
    if not _link_saved(_SAVED.get(model, {}).get(name), weights, folder / WEIGHTS):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in weights.items()}, folder / WEIGHTS, metadata={"format": "pt"})
    config = copy.copy(config)  # the saved config is for inference, as peft's save_pretrained writes it
    config.inference_mode = True
    config.save_pretrained(str(folder))


def remember_saved(model: Any, folder: Path, name: str | None = None) -> None:
    """``folder`` holds adapter ``name``'s weights (default: the active adapter's) as saved or loaded."""
    _SAVED.setdefault(model, {})[name or getattr(model, "active_adapter", DEFAULT)] = Path(folder)


def adapter_weights(model: Any, name: str) -> dict[str, torch.Tensor]:
    """Adapter ``name``'s LoRA tensors under the keys peft saves them with: its name taken out
    (``...q_proj.lora_A.<name>.weight`` -> ``...q_proj.lora_A.weight``), as peft's key mapping does for
    a LoRA module's weights; peft's own walks the whole model three times over to find them."""
    weights = {}
    for key, p in model.named_parameters():
        if name in key.split(".") and "lora_" in key:
            weights[_saved_key(key, name)] = p.detach()
    return weights


def _saved_key(key: str, name: str) -> str:
    """peft's: a parameter named after the adapter loses that name, a module's weight the name before it."""
    if key.endswith(f".{name}"):
        return key.removesuffix(f".{name}")
    module, _, suffix = key.rpartition(".")
    return f"{module.removesuffix(f'.{name}')}.{suffix}"


def _plain(config: Any) -> bool:
    """Whether the adapter's saved weights are its LoRA tensors alone (``learner.trainer.lora_config``'s
    adapters). Others (trained embeddings or biases, extra modules, DoRA) are saved by peft's save_pretrained."""
    from peft.utils.other import EMBEDDING_LAYER_NAMES

    targets = config.target_modules
    return (
        config.peft_type == "LORA"
        and config.bias == "none"
        and not config.use_dora
        and not config.modules_to_save
        and getattr(config, "trainable_token_indices", None) is None
        and not getattr(config, "target_parameters", None)
        and config.task_type is not None
        and config.base_model_name_or_path is not None
        and not isinstance(targets, str)
        and not set(targets or ()) & set(EMBEDDING_LAYER_NAMES)
    )


def _link_saved(source: Path | None, weights: dict[str, torch.Tensor], dest: Path) -> bool:
    """Link ``source``'s weights file at ``dest`` when it holds exactly ``weights``; False: write them."""
    if source is None or not _holds(source / WEIGHTS, weights):
        return False
    try:
        os.link(source / WEIGHTS, dest)
    except FileNotFoundError:
        return False
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source / WEIGHTS, dest)
    return True


def _holds(path: Path, weights: dict[str, torch.Tensor]) -> bool:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as saved:
            if set(saved.keys()) != set(weights):
                return False
            return all(torch.equal(saved.get_tensor(key), value.cpu()) for key, value in weights.items())
    except (OSError, SafetensorError):  # gone (a pruned checkpoint) or unreadable: write the weights
        return False


def _save_pretrained(model: Any, folder: Path, name: str) -> None:
    """peft's save_pretrained (peft puts a named adapter in a sub-folder of its name: it is moved up, so
    every saved adapter looks like a lone learner's)."""
    if name == DEFAULT:
        model.save_pretrained(folder)
        return
    model.save_pretrained(folder, selected_adapters=[name])
    nested = folder / name
    for item in nested.iterdir():
        shutil.move(str(item), folder / item.name)
    nested.rmdir()

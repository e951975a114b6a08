"""LoRA adapters for a model folder, made with peft, whose effect on the outputs is visible."""

from __future__ import annotations

from pathlib import Path

import torch

from learner.config import ALL_LINEAR


def lora_model(model_dir: Path, rank: int = 8, seed: int = 0, scale: float = 0.5):
    """The base model (float32) wrapped with a LoRA whose B weights are random, not peft's zeros (a
    zero B is an adapter that changes nothing). ``scale`` is B's standard deviation; on a tiny random
    model 0.5 moves the next-token log-probs by whole nats."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(
        base,
        LoraConfig(
            r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(ALL_LINEAR), task_type="CAUSAL_LM"
        ),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, scale)
    return model.eval()


def save_random_adapter(model_dir: Path, out: Path, rank: int = 8, seed: int = 0) -> Path:
    """A PEFT adapter folder (adapter_config.json + adapter_model.safetensors) vLLM can load."""
    lora_model(model_dir, rank, seed).save_pretrained(out)
    return out

"""The tiny random model the learner's checks and tests train, built in one place: a 2-layer Qwen2 (or
Llama) of hidden size 64, 2 attention heads over one key-value head, and LoRA on its projections.

``learner.ddp_check`` (under torchrun) and the learner's unit tests (``tests/learner_builders.py``)
build it here. The tiny model the engine serves, written to disk with a tokenizer, is another one:
``harnessrl.engine.model_prep.build_tiny_model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

VOCAB = 64
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 256,
}


def tiny_base(
    kind: str = "qwen2", attention: str = "eager", seed: int = 0, layers: int = 2, vocab: int = VOCAB
) -> torch.nn.Module:
    """The base model, float32, its weights drawn from ``seed``; ``kind`` "qwen2" or "llama"."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    shape = {**SHAPE, "vocab_size": vocab, "num_hidden_layers": layers}
    model = Qwen2ForCausalLM(Qwen2Config(**shape)) if kind == "qwen2" else LlamaForCausalLM(LlamaConfig(**shape))
    model.config._attn_implementation = attention  # eager: the reference; sdpa: what the learner runs
    return model


def tiny_lora(
    base: torch.nn.Module,
    rank: int = 8,
    targets: Sequence[str] = ATTENTION_PROJECTIONS,
    moved: bool = False,
    seed: int | None = None,
) -> torch.nn.Module:
    """``base`` with LoRA of ``rank`` (alpha twice the rank) on ``targets``; torch's generator reseeded
    with ``seed`` where given; moved: LoRA's B drawn at random (it starts at 0, where a first step's
    gradient reaches B alone and the adapter changes nothing)."""
    import torch
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(targets))
    model = get_peft_model(base, lora)
    if seed is not None:
        torch.manual_seed(seed)
    if moved:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.05)
    return model

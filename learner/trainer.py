"""The model side of the learner: base model + LoRA (peft), AdamW on the LoRA weights, the LR schedule,
and one optimizer step on a batch (packing, then ``learner.step.train_step``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from learner.config import LearnerConfig
from learner.distributed import broadcast_trainable, gather_call_deltas, is_distributed, shard, world
from learner.groups import Batch
from learner.memory import return_freed_memory
from learner.mismatch import RowDeltas, call_deltas
from learner.packing import pack_samples
from learner.reference import ReferenceWeights, snapshot
from learner.sharding import match_forwards, shard_base
from learner.step import train_step


@dataclass
class Trainer:
    """Mutable by nature: the weights and optimizer state a step updates in place."""

    model: Any  # peft PeftModel
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    # the KL term's reference when it is the warm start's adapter (learner.reference); None: the base model
    reference: ReferenceWeights | None = None
    # the peft adapter this trainer steps: "default" alone; a policy's own name beside others (learner.adapters)
    adapter: str = "default"

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])


def build_trainer(config: LearnerConfig) -> Trainer:
    """Load the base model from ``model_dir`` and wrap it with a freshly initialised LoRA adapter, or the
    warm start's (``init_adapter``), whose weights are then also the KL term's reference (beta > 0).
    Under torchrun with ``[parallel] shard = "fsdp"`` the base's layers are then sharded over the ranks
    (``learner.sharding``): loaded on the CPU first, so no device ever holds the whole base."""
    from peft import get_peft_model

    torch.manual_seed(config.lora.seed)  # LoRA's A matrices are random: the same seed gives the same start
    sharded = config.parallel.shard == "fsdp" and is_distributed()
    base = load_base(config, torch.device("cpu") if sharded else None)
    if config.lora.init_adapter:  # a warm start (harnessrl sft): its weights, trainable
        from peft import PeftModel

        model = PeftModel.from_pretrained(base, config.lora.init_adapter, is_trainable=True)
    else:
        model = get_peft_model(base, lora_config(config))
    if sharded:
        shard_base(model, training_device(config))
    model.train()  # with lora_dropout 0 (the default) train and eval modes give the same logits
    broadcast_trainable(model)  # under torchrun every rank starts from rank 0's adapter
    # After a warm start the KL keeps the policy near the adapter it began from, not the base model it left
    reference = snapshot(model) if config.lora.init_adapter and config.loss.beta > 0 else None
    optimizer, scheduler = optimizer_for([p for p in model.parameters() if p.requires_grad], config)
    return Trainer(model, optimizer, scheduler, reference)


def load_base(config: LearnerConfig, on: torch.device | None = None) -> Any:
    """The base model from ``model_dir`` on ``on`` (default: the training device), in the training
    device's dtype (no LoRA yet)."""
    from transformers import AutoModelForCausalLM

    return_freed_memory()  # long rows: freed per-layer blocks go back to the OS (learner.memory)
    device = training_device(config)
    # sdpa for plain forwards; the train step switches to packed attention (learner.forward.packed_mode)
    return AutoModelForCausalLM.from_pretrained(
        config.model_dir, dtype=training_dtype(config, device), attn_implementation="sdpa"
    ).to(on or device)


def lora_config(config: LearnerConfig) -> Any:
    """A fresh adapter's peft LoraConfig."""
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora.rank,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=list(config.lora.targets),
        task_type="CAUSAL_LM",
    )


def optimizer_for(params: list[torch.nn.Parameter], config: LearnerConfig):
    """AdamW over one adapter's weights and its LR schedule (``lr_factor``)."""
    adam = config.optimizer
    optimizer = torch.optim.AdamW(params, lr=adam.lr, betas=adam.adam_betas, weight_decay=adam.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_factor(config, k))
    return optimizer, scheduler


def training_device(config: LearnerConfig) -> torch.device:
    """auto: this rank's GPU (LOCAL_RANK under torchrun) when CUDA is available, else the CPU."""
    if config.device != "auto":
        return torch.device(config.device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def training_dtype(config: LearnerConfig, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on CUDA, float32 on CPU. peft keeps the LoRA weights in float32 either way."""
    if config.dtype != "auto":
        return getattr(torch, config.dtype)
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def lr_factor(config: LearnerConfig, k: int) -> float:
    """Multiplier of ``lr`` for optimizer step k (0-based): linear warm-up, then the schedule.

    Warm-up reaches the full rate at step warmup_steps - 1 (never a wasted step at lr 0); linear and
    cosine decay to min_lr_ratio at max_steps.
    """
    if k < config.optimizer.warmup_steps:
        return (k + 1) / config.optimizer.warmup_steps
    if config.optimizer.scheduler == "constant":
        return 1.0
    span = max(1, config.max_steps - config.optimizer.warmup_steps)
    progress = min(1.0, (k - config.optimizer.warmup_steps) / span)
    low = config.optimizer.min_lr_ratio
    if config.optimizer.scheduler == "linear":
        return 1.0 - (1.0 - low) * progress
    return low + (1.0 - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_batch(
    trainer: Trainer, batch: Batch, config: LearnerConfig, mismatch: dict[int, np.ndarray] | None = None
) -> tuple[dict[str, Any], int]:
    """Pack the batch's samples under token_budget and take one optimizer step (gradients accumulated
    over every packed row; under torchrun each rank takes its share of the rows and train_step sums
    across ranks). Returns train_step's metrics and how many samples were too long to pack.

    ``mismatch``, when given, gets each trained call's per-token learner - sampler log-prob
    (``learner.mismatch.call_deltas``, NaN where not compared); under torchrun rank 0 gets every rank's.

    The scheduler advances only when the optimizer did: a batch with nothing to train (all groups
    zero-std, all samples stale) must not eat into the warm-up or the decay.
    """
    if config.batch.token_budget < 1:
        raise ValueError("token_budget = 0 is resolved at start (learner.loop); pass a resolved config")
    packing = pack_samples(
        [s.sample for s in batch.samples],
        [s.advantage for s in batch.samples],
        config.batch.token_budget,
        tree=config.batch.tree_packing,
        min_saved_tokens=config.batch.min_saved_tokens,
        echo=config.loss.echo_weight > 0,  # the tool-result tokens ECHO trains on; none at weight 0
    )
    rows = shard(packing.rows, [row.num_tokens for row in packing.rows], *world())  # all of them in one process
    # log-probs at the temperature the run sampled at (the batch says it: every rank gets the batch)
    step = replace(config.step(), temperature=batch.temperature)
    match_forwards(trainer.model, packing.rows, step, *world())  # a sharded base: as many forwards on every rank
    deltas: list[RowDeltas] = []  # every rank: rank 0 stores them all (a collective below)
    result = train_step(trainer.model, trainer.optimizer, rows, step, batch.version, deltas, trainer.reference)
    per_call = gather_call_deltas(call_deltas(deltas, [s.sample for s in batch.samples]))
    if mismatch is not None:
        mismatch.update(per_call)
    if result["optimizer_stepped"]:
        trainer.scheduler.step()
    return result, len(packing.refused)

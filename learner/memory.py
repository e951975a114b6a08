"""How long a sample the learner can train in the memory it has, and a CPU allocator that gives memory back.

The estimate (``memory_estimate``) is a documented formula, checked against
tests/benchmarks/long_samples.py. With activation checkpointing, one optimizer step on one row of L
tokens needs

    fixed  = output-layer chunk (4 x chunk_tokens x vocab x 4 bytes)
             + RUNTIME_BYTES (allocator, kernels, LoRA gradients and optimizer state)
    per token = bytes x (layers x hidden            # each layer's checkpointed input
                         + 12 x hidden + 4 x intermediate   # one layer recomputed, and its backward
                         + 4 x hidden)               # embeddings, final hidden states, their gradients

and without checkpointing every layer keeps its activations: ``layers x (16 x hidden + 6 x
intermediate)`` per token instead of the first two terms. Attention adds nothing per token pair
(learner.attention is O(L)). The longest trainable sample is (available - fixed) / per token, with
``available`` the device's free memory once the model is loaded (its weights are already in use).

glibc's malloc keeps freed blocks below its (self-raising) mmap threshold in its heaps: a long row's
per-layer temporaries, freed and reallocated layer after layer, grew the RSS of one 2k-token step by
1.4 GB that was never returned (measured). ``return_freed_memory`` fixes the threshold at 1 MiB, so
large blocks are mapped and unmapped: the same step then grew it by 14 MB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger("learner")

RUNTIME_BYTES = 1 << 30
M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD_BYTES = 1 << 20


@dataclass(frozen=True)
class MemoryEstimate:
    available_bytes: int  # free memory on the training device now
    fixed_bytes: int
    bytes_per_token: int
    max_tokens: int  # the longest sample one step can train in the available memory

    def describe(self) -> str:
        return (
            f"{self.available_bytes / 2**30:.1f} GiB available, {self.fixed_bytes / 2**30:.2f} GiB fixed + "
            f"{self.bytes_per_token / 1024:.0f} KiB per token: samples up to ~{self.max_tokens:,} tokens "
            f"fit in one step (learner.memory formula)"
        )


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at 1 MiB so large freed blocks go back to the OS (see module doc).
    Returns whether it applied (False off glibc, e.g. macOS or musl)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        return bool(libc and libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except (OSError, AttributeError):
        return False


def available_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory_estimate(
    model: torch.nn.Module, chunk_tokens: int, checkpointing: bool, available: int | None = None
) -> MemoryEstimate:
    """The module doc's formula for a transformers causal LM (peft-wrapped or not)."""
    config = getattr(model, "config", None) or model.get_base_model().config
    config = getattr(config, "text_config", config)
    first = next(model.parameters())
    width = max(first.element_size(), 2)
    hidden, layers = int(config.hidden_size), int(config.num_hidden_layers)
    intermediate = int(getattr(config, "intermediate_size", 4 * hidden))
    fixed = 4 * chunk_tokens * int(config.vocab_size) * 4 + RUNTIME_BYTES
    if checkpointing:
        per_token = width * (layers * hidden + 12 * hidden + 4 * intermediate + 4 * hidden)
    else:
        per_token = width * (layers * (16 * hidden + 6 * intermediate) + 4 * hidden)
    free = available_bytes(first.device) if available is None else available
    return MemoryEstimate(free, fixed, per_token, max(0, (free - fixed) // per_token))

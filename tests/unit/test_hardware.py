"""The managed engine's dtype and KV cache, chosen from what the machine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from harnessrl.engine.hardware import batched_tokens, choose_dtype, cpu_flags, kv_cache_gib
from harnessrl.engine.process import EngineLaunch, vllm_command, vllm_env

AVX2_VM = frozenset("fpu sse2 avx avx2 fma avx512f".split())  # AVX-512 but no bf16: emulated
SAPPHIRE_RAPIDS = AVX2_VM | {"avx512_bf16", "amx_bf16", "amx_tile"}


def test_cpu_without_native_bf16_serves_float32():
    choice = choose_dtype("auto", gpu=False, flags=AVX2_VM)
    assert choice.dtype == "float32"
    assert "no native bf16" in choice.reason


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_cpu_with_native_bf16_serves_bfloat16(flag):
    choice = choose_dtype("auto", gpu=False, flags=AVX2_VM | {flag})
    assert choice.dtype == "bfloat16"
    assert flag in choice.reason


def test_gpu_serves_bfloat16_whatever_the_cpu():
    assert choose_dtype("auto", gpu=True, flags=AVX2_VM).dtype == "bfloat16"


def test_explicit_dtype_overrides_the_machine():
    assert choose_dtype("float32", gpu=True, flags=SAPPHIRE_RAPIDS).dtype == "float32"
    assert choose_dtype("bfloat16", gpu=False, flags=AVX2_VM).dtype == "bfloat16"


def test_unknown_dtype_names_the_choices():
    with pytest.raises(ValueError, match="auto, float32, bfloat16, float16"):
        choose_dtype("fp8", gpu=False, flags=AVX2_VM)


def test_cpu_flags_read_the_flags_line(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_aarch64_features_line_counts_too(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert choose_dtype("auto", gpu=False, flags=cpu_flags(cpuinfo)).dtype == "bfloat16"


def test_kv_cache_is_a_quarter_of_free_memory_within_bounds():
    assert kv_cache_gib(20 * 2**30) == 5
    assert kv_cache_gib(2 * 2**30) == 2  # never below what an 8k agent prompt needs
    assert kv_cache_gib(1024 * 2**30) == 32
    assert kv_cache_gib(None) == 2


def test_launch_passes_the_dtype_and_kv_cache_to_vllm(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    launch = EngineLaunch(model_dir=tmp_path, dtype="float32", kv_cache_gib=3)
    command = vllm_command(launch)
    assert command[command.index("--dtype") + 1] == "float32"
    assert vllm_env(launch)["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_cpu_engines_prefill_agent_prompts_in_large_chunks():
    assert batched_tokens(8192, gpu=False) == 8192
    assert batched_tokens(131072, gpu=False) == 8192
    assert batched_tokens(1024, gpu=False) == 2048  # never below vLLM's own CPU default
    assert batched_tokens(8192, gpu=True) is None  # vLLM's GPU defaults stand


def test_an_explicit_batched_token_flag_is_not_overridden(tmp_path: Path):
    command = vllm_command(
        EngineLaunch(model_dir=tmp_path, dtype="float32", extra_args=("--max-num-batched-tokens", "512"))
    )
    assert command.count("--max-num-batched-tokens") == 1

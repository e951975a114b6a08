"""The learner's step with its base sharded by FSDP2 under `torchrun --nproc_per_node 2` (gloo, CPU) equals
one process on the whole batch: same LoRA weights after the steps, same metrics, on both ranks, and the
adapter rank 0 saves (as publishing does) is the one process's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learner.ddp_check import fixed_rows, lora_weights, run_steps, tiny_lora_model

REPO = Path(__file__).resolve().parents[2]
STEPS = 2
SAMPLES = 11  # 5 packed rows: 2 ranks get 2 and 3, so the lighter one runs a padding row each step


def sharded_check(out: Path) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    command += ["-m", "learner.ddp_check", "--out", str(out), "--steps", str(STEPS)]
    command += ["--samples", str(SAMPLES), "--shard", "fsdp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks share the machine's cores
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def test_two_ranks_with_a_sharded_base_take_the_same_steps_as_one_process(tmp_path):
    from peft import get_peft_model_state_dict
    from safetensors.torch import load_file

    ranks = sharded_check(tmp_path)
    model = tiny_lora_model()
    want_metrics = run_steps(model, fixed_rows(model, n=SAMPLES), STEPS)
    want_weights = lora_weights(model)

    assert sum(r["metrics"][0]["padding_rows"] for r in ranks) > 0  # the uneven split was exercised
    for result in ranks:
        held, whole = result["base_numel"]
        assert held < 0.75 * whole  # the decoder layers are split; the embeddings stay whole
        assert result["weights"].keys() == want_weights.keys()
        for name, value in want_weights.items():
            torch.testing.assert_close(result["weights"][name], value, atol=1e-6, rtol=1e-5, msg=name)
        for got, want in zip(result["metrics"], want_metrics, strict=True):
            assert got["optimizer_stepped"] and (got["tokens_trained"], got["rows"]) == (
                want["tokens_trained"],
                want["rows"],
            )
            for key in ("loss", "grad_norm", "ratio_min", "ratio_max", "clip_frac_low", "clip_frac_high"):
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    want_saved = get_peft_model_state_dict(model)
    assert saved.keys() == want_saved.keys()
    for name, value in want_saved.items():
        torch.testing.assert_close(saved[name], value, atol=1e-6, rtol=1e-5, msg=name)

"""The learner's step under `torchrun --nproc_per_node 2` (gloo, CPU) equals one process on the whole
batch: same LoRA weights after the steps, same metrics, on both ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learner.ddp_check import MAX_GRAD_NORM, fixed_rows, lora_weights, run_steps, tiny_lora_model
from learner.distributed import shard

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


def torchrun_check(out: Path) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               "-m", "learner.ddp_check", "--out", str(out), "--steps", str(STEPS)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # two ranks share the machine's cores
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(out / f"rank{rank}.pt") for rank in (0, 1)]


def single_process(rows_of=None) -> tuple[dict[str, torch.Tensor], list[dict]]:
    model = tiny_lora_model()
    rows = fixed_rows(model)
    metrics = run_steps(model, rows if rows_of is None else rows_of(rows), STEPS)
    return lora_weights(model), metrics


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, atol=1e-6, rtol=1e-5, msg=name)


def test_two_ranks_take_the_same_steps_as_one_process_on_the_whole_batch(tmp_path):
    ranks = torchrun_check(tmp_path)
    want_weights, want_metrics = single_process()
    assert all(r["rows"] > 0 for r in ranks) and sum(r["rows"] for r in ranks) == ranks[0]["of_rows"]
    for result in ranks:
        assert_same_weights(result["weights"], want_weights)
        for got, want in zip(result["metrics"], want_metrics, strict=True):
            assert got["optimizer_stepped"] and want["optimizer_stepped"]
            assert (got["tokens_trained"], got["tokens"], got["rows"]) == (want["tokens_trained"], want["tokens"],
                                                                           want["rows"])
            for key in ("loss", "grad_norm", "ratio_min", "ratio_max", "clip_frac_low", "clip_frac_high",
                        "is_masked_fraction"):
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    first = want_metrics[0]
    assert first["is_masked_fraction"] > 0 and first["clip_frac_low"] + first["clip_frac_high"] > 0
    assert first["grad_norm"] > MAX_GRAD_NORM  # clipped, by the norm over both ranks' gradients


def test_one_rank_alone_would_take_a_different_step():
    """The comparison above has teeth: without the all-reduce, a rank's update is not the batch's."""
    whole, _ = single_process()
    half, _ = single_process(lambda rows: shard(rows, [r.num_tokens for r in rows], 0, 2))
    moved = max(float((half[k] - whole[k]).abs().max()) for k in whole)
    assert moved > 1e-4

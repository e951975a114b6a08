"""The memory-linear learner path (packed attention, chunked log-probs from hidden states, activation
checkpointing) gives the previous path's loss, log-probs, ratios and LoRA gradients (float64, tiny real
Qwen2 and Llama models), and its memory grows linearly with the row's length."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from learner.forward import ForwardConfig, chunked_token_logprobs, packed_mode
from learner.loss import LossConfig
from learner.memory import memory_estimate, return_freed_memory
from learner.packing import pack_samples
from learner.step import StepConfig, accumulate_gradients, row_logprobs
from tests.learner_builders import (
    grads,
    lora_model,
    on_policy_samples,
    previous_path_backward,
)

PROBE = Path(__file__).parent / "learner_memory_probe.py"


def test_chunked_logprobs_equal_a_full_log_softmax_with_its_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    head = torch.nn.Linear(8, 20, bias=False).double()
    targets = torch.randint(0, 20, (11,))
    seen = []
    head.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[0]))
    lp, ent = chunked_token_logprobs(hidden, head, targets, temperature=0.7, chunk_tokens=4)
    (lp * torch.arange(11)).sum().backward()
    got_hidden, got_weight = hidden.grad.clone(), head.weight.grad.clone()
    assert max(seen) == 4  # never more than chunk_tokens rows of logits, forward or backward recompute
    hidden.grad, head.weight.grad = None, None
    logp = F.log_softmax(head(hidden) / 0.7, dim=-1)
    want = logp.gather(-1, targets[:, None])[:, 0]
    (want * torch.arange(11)).sum().backward()
    torch.testing.assert_close(lp.double(), want.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ent.double(), -(logp.exp() * logp).sum(-1).detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got_hidden, hidden.grad)
    torch.testing.assert_close(got_weight, head.weight.grad)


def test_chunked_logprobs_of_no_tokens_are_empty():
    lp, ent = chunked_token_logprobs(torch.zeros(0, 4), torch.nn.Linear(4, 5), torch.zeros(0, dtype=torch.long))
    assert lp.shape == ent.shape == (0,)


FORWARDS = {
    "one_chunk": ForwardConfig(),
    "many_chunks_checkpointed": ForwardConfig(chunk_tokens=3, checkpoint_min_tokens=0),
}


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("forward", list(FORWARDS))
def test_the_new_path_equals_the_previous_path_in_float64(kind, forward):
    model = lora_model(
        kind=kind,
        dtype=torch.float64,
        moved=True,
        targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    )
    model.train()
    samples = on_policy_samples(model, 4, n=6, noise=1.5)  # ratios spread: some clipped, some masked
    advantages = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0]
    config = StepConfig(loss=LossConfig(), temperature=0.8, forward=FORWARDS[forward])
    # the previous path: one row of all samples, dense block mask, full logits
    want_stats, want_lp = previous_path_backward(model, samples, advantages, config.loss, config.temperature)
    want = grads(model)
    model.zero_grad(set_to_none=True)
    rows = list(pack_samples(samples, advantages, token_budget=30).rows)
    assert len(rows) > 1
    stats, _ = accumulate_gradients(model, rows, config)
    got = grads(model)
    assert (stats.tokens_sampled, stats.tokens_trained) == (want_stats.tokens_sampled, want_stats.tokens_trained)
    assert (stats.tokens_clipped_low, stats.tokens_clipped_high) == (
        want_stats.tokens_clipped_low,
        want_stats.tokens_clipped_high,
    )
    assert 0 < stats.tokens_trained < stats.tokens_sampled  # the ratio mask took some out
    for name in ("loss_sum", "ratio_sum", "ratio_min", "ratio_max"):
        assert getattr(stats, name) == pytest.approx(getattr(want_stats, name), rel=1e-9, abs=1e-9), name
    assert stats.entropy_sum == pytest.approx(want_stats.entropy_sum, rel=1e-6)  # the previous: float32
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-9, atol=1e-11)
    # per-token log-probs: each trained token's, in the previous path's [L] layout
    starts = np.cumsum([0] + [len(s.input_ids) for s in samples])
    with torch.no_grad(), packed_mode(model):
        for row in rows:
            new, _ = row_logprobs(model, row, config)
            where = [int(starts[row.sample_indices[k]] + t) for k, t in zip(row.target_samples, row.target_offsets)]
            torch.testing.assert_close(new.double(), want_lp[where].double(), rtol=1e-9, atol=1e-9)


def test_the_model_attention_is_restored_after_a_step():
    model = lora_model()
    rows = list(pack_samples(on_policy_samples(model, 0), [1.0] * 5, token_budget=40).rows)
    accumulate_gradients(model, rows, StepConfig(forward=ForwardConfig(checkpoint_min_tokens=0)))
    assert model.config._attn_implementation == "eager"
    model(input_ids=torch.tensor([[1, 2, 3]]))  # a plain forward still works
    assert not any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def probe(length: int, path: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(PROBE), str(length), path],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_step_memory_grows_linearly_with_the_row_length():
    # a tiny model (64 hidden, 2 layers): what grows with L is attention and its mask, which the
    # previous path built dense (L x L) and this one never does
    short, long = probe(2048, "new"), probe(8192, "new")
    growth = (long["peak_mb"] - long["base_mb"]) / max(short["peak_mb"] - short["base_mb"], 1.0)
    assert growth < 4.5, (short, long)
    assert long["peak_mb"] - long["base_mb"] < 200, long  # the previous path: > 1 GB of masks and scores


def test_the_previous_path_fails_the_same_memory_check():
    long = probe(8192, "previous")
    assert long["peak_mb"] - long["base_mb"] > 500, long


def test_the_memory_formula_says_how_long_a_sample_fits():
    model = lora_model()
    checkpointed = memory_estimate(model, chunk_tokens=512, checkpointing=True, available=4 << 30)
    kept = memory_estimate(model, chunk_tokens=512, checkpointing=False, available=4 << 30)
    # tiny Qwen2: 2 layers x 64 hidden, 128 intermediate, float32
    assert checkpointed.bytes_per_token == 4 * (2 * 64 + 12 * 64 + 4 * 128 + 4 * 64)
    assert kept.bytes_per_token == 4 * (2 * (16 * 64 + 6 * 128) + 4 * 64)
    assert (
        checkpointed.max_tokens
        == (checkpointed.available_bytes - checkpointed.fixed_bytes) // (checkpointed.bytes_per_token)
        > kept.max_tokens
    )
    assert "tokens fit in one step" in checkpointed.describe()
    assert memory_estimate(model, 512, True, available=0).max_tokens == 0


def test_freed_memory_goes_back_to_the_os_on_glibc():
    assert return_freed_memory() is True  # this machine's Python runs on glibc

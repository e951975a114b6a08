"""Train/inference mismatch (learner.mismatch): measured on the tokens the learner's own version
sampled, equal to a direct computation, and left out for stale or teacher tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from learner.mismatch import MismatchStats, is_alarming, logprob_mismatch
from learner.packing import pack_samples
from learner.step import StepConfig, train_step
from tests.learner_builders import lora_model, on_policy_samples, own_logprobs


def test_the_stats_are_the_mean_max_k3_and_share_over_of_the_fresh_tokens():
    new = torch.tensor([-1.0, -2.0, -0.5, -3.0, -1.0])
    old = torch.tensor([-1.2, -2.0, -0.1, -9.0, float("nan")])  # the last: a teacher's token, no sampler
    fresh = torch.tensor([True, True, True, False, True])  # the fourth: sampled by an older version
    stats = logprob_mismatch(new, old, fresh)
    deltas = [0.2, 0.0, -0.4]
    assert stats.tokens == 3 and stats.over == 2
    assert stats.abs_sum == pytest.approx(0.6) and stats.abs_max == pytest.approx(0.4)
    assert stats.k3_sum == pytest.approx(sum(math.exp(d) - 1 - d for d in deltas))
    metrics = stats.merge(MismatchStats.empty()).metrics()
    assert metrics["mismatch_mean_abs"] == pytest.approx(0.2) and metrics["mismatch_frac_over"] == pytest.approx(2 / 3)
    assert MismatchStats.empty().metrics()["mismatch_mean_abs"] is None
    assert is_alarming(metrics, 0.1) and not is_alarming(metrics, 0.25)


def test_a_step_reports_the_mismatch_of_its_own_versions_tokens_only():
    model = lora_model()
    fresh = on_policy_samples(model, 3, noise=0.05)  # the sampler's log-probs: the model's own + noise
    for sample in fresh:
        sample.policy_versions[sample.loss_mask == 1] = 1  # sampled by version 1, the learner's
    stale = on_policy_samples(model, 4, n=2, noise=1.0)  # far off, but sampled by version 0
    expected = np.concatenate(
        [np.abs(own_logprobs(model, s.input_ids) - s.old_logprobs)[1:][s.loss_mask[1:] == 1] for s in fresh]
    )
    rows = pack_samples(fresh + stale, [1.0] * len(fresh + stale), token_budget=64).rows
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    metrics = train_step(model, optimizer, list(rows), StepConfig(), version=1)
    assert metrics["mismatch_tokens"] == len(expected) < metrics["tokens_sampled"]
    assert metrics["mismatch_mean_abs"] == pytest.approx(float(expected.mean()), rel=1e-4)
    assert metrics["mismatch_max_abs"] == pytest.approx(float(expected.max()), rel=1e-4)
    unknown = train_step(model, optimizer, list(rows), StepConfig(), version=None)  # weights moved since a publish
    assert unknown["mismatch_tokens"] == 0 and unknown["mismatch_mean_abs"] is None

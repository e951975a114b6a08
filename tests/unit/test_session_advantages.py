"""Advantages for sessions without groups (learner.session_advantages): leave-one-out across a batch
until a key has a history, then the key's own moving baseline of earlier rewards."""

from __future__ import annotations

import pytest
import torch

from learner.session_advantages import RunningBaselines, leave_one_out, session_advantages


def test_leave_one_out_sums_to_zero_and_ignores_a_shift_of_every_reward():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25])
    advantages = leave_one_out(rewards)
    assert advantages[0] == pytest.approx(1.0 - 0.75 / 3)
    assert float(advantages.sum()) == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(leave_one_out(rewards + 7.0), advantages)
    assert leave_one_out(torch.tensor([0.8])).tolist() == [0.0]


def test_a_key_with_history_is_baselined_by_its_own_earlier_rewards_only():
    baselines = RunningBaselines(decay=0.5, min_count=2)
    session_advantages(torch.tensor([1.0, 1.0]), ["ann", "ann"], baselines)  # ann: history 1, 1
    session_advantages(torch.tensor([0.0, 0.0]), ["bob", "bob"], baselines)  # bob: history 0, 0
    advantages = session_advantages(torch.tensor([1.0, 1.0]), ["ann", "bob"], baselines)
    assert advantages.tolist() == [0.0, 1.0]  # the same reward: no news for ann, good news for bob


def test_new_keys_fall_back_to_leave_one_out_across_the_batch():
    baselines = RunningBaselines(min_count=3)
    advantages = session_advantages(torch.tensor([1.0, 0.0, 0.0]), ["a", "b", "c"], baselines)
    assert torch.allclose(advantages, leave_one_out(torch.tensor([1.0, 0.0, 0.0])))
    assert baselines.count == {"a": 1, "b": 1, "c": 1} and baselines.mean["a"] == 1.0


def test_the_baseline_follows_a_moving_average_and_a_session_never_baselines_itself():
    baselines = RunningBaselines(decay=0.5, min_count=1)
    session_advantages(torch.tensor([1.0]), ["k"], baselines)
    [advantage] = session_advantages(torch.tensor([0.0]), ["k"], baselines).tolist()
    assert advantage == -1.0  # against the earlier 1.0, not a mean that includes itself
    assert baselines.mean["k"] == pytest.approx(0.5)


def test_bad_batches_are_refused():
    with pytest.raises(ValueError, match="not finite"):
        session_advantages(torch.tensor([float("nan")]), ["k"], RunningBaselines())
    with pytest.raises(ValueError, match="2 rewards for 1 keys"):
        session_advantages(torch.tensor([1.0, 0.0]), ["k"], RunningBaselines())

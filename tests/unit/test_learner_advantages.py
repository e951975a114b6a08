"""GRPO advantages against a numpy reference: population std, None rewards, zero-std groups."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learner.advantages import group_advantages


def reference(groups, eps=1e-6):
    """Plain numpy: per group, standardise the scored rewards; None where unscored or zero-std."""
    out = []
    for group in groups:
        scored = np.array([r for r in group if r is not None], dtype=np.float64)
        if len(scored) == 0 or np.std(scored) <= eps:  # np.std is the population std (ddof=0)
            out.append([None] * len(group))
            continue
        mean, std = scored.mean(), np.std(scored)
        out.append([None if r is None else (r - mean) / std for r in group])
    return out


def random_groups(seed, n_groups=40):
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(n_groups):
        size = int(rng.integers(1, 9))
        kind = rng.integers(0, 4)
        if kind == 0:  # binary verifier rewards: often all equal
            rewards = [float(x) for x in rng.integers(0, 2, size)]
        else:
            rewards = [float(x) for x in rng.normal(0.5, 1.0, size)]
        groups.append([None if rng.random() < 0.2 else r for r in rewards])
    return groups


def assert_same(actual, expected):
    assert len(actual) == len(expected)
    for got_group, want_group in zip(actual, expected):
        assert len(got_group) == len(want_group)
        for got, want in zip(got_group, want_group):
            if want is None:
                assert got is None
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_advantages_match_numpy_reference_on_random_groups(seed):
    groups = random_groups(seed)
    result = group_advantages(groups)
    assert_same(result.advantages, reference(groups))


def test_kept_groups_have_zero_mean_and_unit_rms():
    result = group_advantages([[0.0, 1.0, 1.0, 3.0], [2.0, -1.0]])
    for group in result.advantages:
        values = np.array(group)
        assert values.mean() == pytest.approx(0.0, abs=1e-12)
        assert np.sqrt((values**2).mean()) == pytest.approx(1.0)


def test_population_std_gives_plus_minus_one_for_a_binary_pair():
    # the sample std (ddof=1) would give +-0.707 here
    assert group_advantages([[0.0, 1.0]]).advantages == ((-1.0, 1.0),)


def test_none_rewards_get_no_advantage_and_stay_out_of_the_statistics():
    result = group_advantages([[1.0, None, 0.0, None]])
    assert result.advantages == ((1.0, None, -1.0, None),)
    assert result.rollouts_kept == 2 and result.rollouts_unscored == 2
    assert result.reward_mean_all == 0.5 and result.reward_mean_kept == 0.5


def test_all_equal_rewards_drop_the_group_and_count_it():
    # three rewards of 0.1 average to 0.10000000000000002: rounding must not make a "signal"
    result = group_advantages([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0]])
    assert result.advantages[0] == (None, None, None) and result.advantages[1] == (None,) * 4
    assert result.groups_kept == 1 and result.groups_zero_std == 2 and result.groups_dropped == 2
    assert result.frac_reward_zero_std == pytest.approx(2 / 3)


def test_a_single_scored_rollout_is_a_zero_std_group():
    result = group_advantages([[None, 0.7, None]])
    assert result.advantages == ((None, None, None),)
    assert result.groups_zero_std == 1 and result.groups_empty == 0 and result.rollouts_kept == 0
    assert result.reward_mean_all == pytest.approx(0.7) and result.reward_mean_kept is None


def test_a_group_with_no_scored_rollout_is_empty_not_zero_std():
    result = group_advantages([[None, None], [0.0, 1.0]])
    assert result.groups_empty == 1 and result.groups_zero_std == 0 and result.groups_dropped == 1
    assert result.frac_reward_zero_std == 0.0  # out of the one group that was scored


def test_reward_means_cover_all_scored_rollouts_and_kept_groups():
    groups = [[1.0, 1.0], [0.0, 1.0, 2.0], [None, 4.0]]
    result = group_advantages(groups)
    assert result.reward_mean_all == pytest.approx(np.mean([1, 1, 0, 1, 2, 4]))
    assert result.reward_mean_kept == pytest.approx(1.0)
    assert result.frac_reward_zero_std == pytest.approx(2 / 3)


def test_no_groups_give_empty_results_not_nan():
    result = group_advantages([])
    assert result.advantages == () and result.groups_kept == 0
    assert result.reward_mean_all is None and result.reward_mean_kept is None
    assert result.frac_reward_zero_std is None


def test_without_std_scaling_advantages_are_mean_centred():
    result = group_advantages([[0.0, 2.0, 4.0]], scale_by_std=False)
    assert result.advantages == ((-2.0, 0.0, 2.0),)


def test_eps_sets_the_zero_std_threshold():
    assert group_advantages([[1.0, 1.0 + 1e-9]]).groups_zero_std == 1
    assert group_advantages([[1.0, 1.0 + 1e-9]], eps=1e-12).groups_kept == 1


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_rewards_are_refused(bad):
    with pytest.raises(ValueError, match="not finite"):
        group_advantages([[0.0, bad]])

"""MaxRL's per-group advantage, (r - mean) / mean ([batch] advantage = "maxrl"), against its formula and GRPO's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import learner.loop
from learner.advantages import group_advantages, maxrl_advantages
from learner.config import ConfigError, LearnerConfig
from learner.groups import ReadyGroup, RolloutData, UnusableGroup, check_group
from store.listings import GroupFilter
from tests.learner_groups import RUN, add_group, config_for, train


def test_maxrl_advantages_of_a_known_group_equal_the_formula():
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0]  # K = 2 successes of N = 5: mean 0.4
    mean = 0.4
    want = [(r - mean) / mean for r in rewards]  # success (N - K) / K = 1.5, failure -1
    assert maxrl_advantages(np.array(rewards)).tolist() == pytest.approx(want)
    assert want == pytest.approx([1.5, -1.0, 1.5, -1.0, -1.0])
    assert group_advantages([rewards], maxrl=True).advantages[0] == pytest.approx(tuple(want))


def test_maxrl_advantages_work_row_by_row_on_a_batch_of_groups():
    rewards = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])  # [G=3, N=4]
    got = maxrl_advantages(rewards)
    assert got.shape == (3, 4)
    assert got[0].tolist() == pytest.approx([3.0, -1.0, -1.0, -1.0])
    assert got[1].tolist() == pytest.approx([0.0, 1.0, -1.0, 0.0])  # fractional success in [0, 1]: mean 0.5
    assert got[2].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_a_rare_success_gets_a_larger_advantage_than_under_grpos_std_scaling():
    rewards = [[1.0] + [0.0] * 7]  # 1 of 8: p = 1/8
    grpo = group_advantages(rewards).advantages[0]
    maxrl = group_advantages(rewards, maxrl=True).advantages[0]
    assert maxrl[0] == pytest.approx(7.0)  # (N - K) / K
    assert grpo[0] == pytest.approx((7 / 8) / math.sqrt(7 / 64))  # (1 - p) / sqrt(p (1 - p)) ~ 2.65
    assert maxrl[0] > grpo[0]
    assert maxrl[1] == pytest.approx(-1.0)  # a failure always gets -1


def test_a_common_success_gets_a_smaller_advantage_than_under_grpo():
    rewards = [[0.0] + [1.0] * 7]  # 7 of 8: easy prompts weigh less under maximum likelihood
    assert group_advantages(rewards, maxrl=True).advantages[0][1] < group_advantages(rewards).advantages[0][1]


def test_a_group_with_zero_mean_gives_no_signal_and_counts_as_zero_std():
    result = group_advantages([[0.0, 0.0, 0.0], [0.0, 1.0]], maxrl=True)
    assert result.advantages[0] == (None, None, None)
    assert result.groups_zero_std == 1 and result.groups_kept == 1
    assert maxrl_advantages(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]


def test_a_group_whose_mean_is_below_eps_gives_no_signal_even_with_a_spread():
    rewards = [1e-3] + [0.0] * 999  # mean 1e-6, population std ~3e-5 > eps: GRPO keeps it, MaxRL cannot divide
    assert group_advantages([rewards]).groups_kept == 1
    result = group_advantages([rewards], maxrl=True)
    assert result.groups_kept == 0 and result.groups_zero_std == 1
    assert result.advantages[0] == (None,) * 1000


def test_all_successes_give_no_signal():
    assert group_advantages([[1.0, 1.0, 1.0]], maxrl=True).groups_zero_std == 1


def test_unscored_rollouts_stay_out_of_maxrls_mean():
    result = group_advantages([[1.0, None, 0.0, 0.0, 0.0]], maxrl=True)  # mean of the scored 4: 0.25
    assert result.advantages == ((pytest.approx(3.0), None, -1.0, -1.0, -1.0),)
    assert result.rollouts_kept == 4 and result.rollouts_unscored == 1


@pytest.mark.parametrize("bad", [-0.5, 1.5, 2.0])
def test_a_reward_outside_0_1_is_refused_under_maxrl_naming_the_key(bad):
    with pytest.raises(ValueError, match=r'batch\.advantage = "maxrl"'):
        group_advantages([[0.0, bad]], maxrl=True)
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        maxrl_advantages(np.array([0.0, bad]))
    group_advantages([[0.0, bad]])  # GRPO's takes any finite reward


def test_the_intake_quarantines_a_group_maxrl_cannot_use_and_only_under_maxrl():
    group = ReadyGroup(3, None, (RolloutData(1, 0.0, ()), RolloutData(2, 5.0, ())))
    with pytest.raises(UnusableGroup, match=r'outside \[0, 1\].*batch\.advantage = "maxrl"'):
        check_group(group, 1.0, maxrl=True)
    check_group(group, 1.0)  # GRPO's: usable


def test_maxrl_is_a_batch_advantage_choice_and_the_default_stays_grpos():
    assert LearnerConfig().batch.advantage == "group" and LearnerConfig().batch.scale_by_std is True
    assert LearnerConfig().updated(batch={"advantage": "maxrl"}).batch.advantage == "maxrl"


@pytest.mark.parametrize("bad", ["MaxRL", "mean", "", 1])
def test_a_bad_advantage_value_is_an_error_naming_the_key(bad):
    with pytest.raises(ConfigError, match=r"batch\.advantage"):
        LearnerConfig().updated(batch={"advantage": bad})


def test_maxrl_with_scale_by_std_false_is_an_error_naming_both_keys():
    with pytest.raises(ConfigError, match=r"batch\.scale_by_std.*batch\.advantage = 'maxrl'"):
        LearnerConfig().updated(batch={"advantage": "maxrl", "scale_by_std": False})


# --- in the learner's loop ---------------------------------------------------------------------


async def test_the_learner_trains_on_maxrls_advantages_and_quarantines_rewards_outside_0_1(
    file_store, tiny_model_dir, tmp_path, monkeypatch
):
    built, build_batch = [], learner.loop.build_batch

    def spying(*args, **kwargs):
        built.append(build_batch(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(learner.loop, "build_batch", spying)
    await add_group(file_store, "scaled", [0.0, 2.0, 0.0, 2.0], seed=1)  # GRPO's would take it
    await add_group(file_store, "rare", [1.0, 0.0, 0.0, 0.0], seed=2)
    await add_group(file_store, "half", [0.0, 1.0, 0.0, 1.0], seed=3)

    config = config_for(tiny_model_dir, tmp_path / "out", max_steps=1, advantage="maxrl")
    result = await train(config, file_store)

    assert result.step == 1
    [batch] = built
    assert [group.rollouts[0].reward for group in batch.groups] == [1.0, 0.0]  # "scaled" was quarantined
    assert batch.advantages.advantages == (
        pytest.approx((3.0, -1.0, -1.0, -1.0)),
        pytest.approx((-1.0, 1.0, -1.0, 1.0)),
    )
    [error] = [g.error for g, _, _ in await file_store.listings.groups(GroupFilter(run=RUN), 0, 100) if g.error]
    assert 'reward 2.0 is outside [0, 1]: batch.advantage = "maxrl"' in error

"""pass@k is the unbiased estimator (checked against counting every draw) and the interval is the t-free 95% one."""

from __future__ import annotations

import itertools
import math

import pytest

from store.passk import mean_interval, mean_pass_at_k, pass_at_k


def pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    """The share of all k-subsets of n samples (c passing) that hold at least one pass."""
    samples = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in draw) for draw in draws) / len(draws)


@pytest.mark.parametrize(
    ("n", "c", "k"), [(8, 0, 1), (8, 3, 1), (8, 3, 4), (8, 5, 4), (8, 8, 8), (10, 1, 10), (6, 2, 3), (5, 4, 2)]
)
def test_pass_at_k_equals_the_share_of_draws_with_a_pass(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_by_enumeration(n, c, k), abs=1e-12)


def test_pass_at_1_is_the_pass_rate_and_large_n_stays_finite():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(10_000, 1, 5000) == pytest.approx(0.5)
    assert math.isfinite(pass_at_k(100_000, 37, 64))


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_a_policys_pass_at_k_is_the_mean_over_tasks_with_enough_samples():
    assert mean_pass_at_k([(4, 4), (4, 0), (2, 2)], 4) == pytest.approx(0.5)  # (2, 2) has too few samples
    assert mean_pass_at_k([(2, 1)], 4) is None


def test_the_interval_is_mean_plus_minus_1_96_standard_errors():
    values = [0.0, 1.0, 1.0, 0.0, 1.0]
    found = mean_interval(len(values), sum(values), sum(v * v for v in values))
    mean = 0.6
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / 4 / 5)
    assert found.mean == pytest.approx(mean) and found.n == 5
    assert found.low == pytest.approx(mean - 1.959964 * se) and found.high == pytest.approx(mean + 1.959964 * se)
    assert mean_interval(0, 0.0, 0.0).mean is None
    assert mean_interval(1, 0.5, 0.25).low == 0.5

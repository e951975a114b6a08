"""A live key's session bucket (gateway.request.session_rate): a burst, then the rate, per key."""

from __future__ import annotations

import pytest

from gateway.request.session_rate import SessionRate, retry_after_s


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_opens_its_burst_then_one_session_per_earned_token_and_others_are_apart():
    clock = Clock()
    rate = SessionRate(per_minute=6.0, burst=2, clock=clock)
    assert rate.take(1) is None and rate.take(1) is None
    assert rate.take(1) == 10.0  # one session per 10 s
    assert rate.take(2) is None  # another key has its own bucket
    clock.now = 9.0
    assert rate.take(1) == pytest.approx(1.0)
    clock.now = 10.0
    assert rate.take(1) is None


def test_a_refused_call_does_not_spend_and_the_bucket_never_holds_more_than_the_burst():
    clock = Clock()
    rate = SessionRate(per_minute=60.0, burst=1, clock=clock)
    assert rate.take(1) is None
    assert rate.take(1) == 1.0 and rate.take(1) == 1.0
    clock.now = 3600.0
    assert rate.take(1) is None and rate.take(1) == 1.0


def test_no_rate_means_no_bound_and_retry_after_is_whole_seconds():
    rate = SessionRate(per_minute=0.0, burst=0)
    assert all(rate.take(1) is None for _ in range(1000))
    assert retry_after_s(0.2) == 1 and retry_after_s(10.0) == 10 and retry_after_s(10.1) == 11


def test_a_token_given_back_for_a_session_that_did_not_open_can_be_taken_again_and_never_beyond_the_burst():
    clock = Clock()
    rate = SessionRate(per_minute=1.0, burst=2, clock=clock)
    assert rate.take(1) is None and rate.take(1) is None and rate.take(1) is not None
    rate.give_back(1)
    assert rate.take(1) is None and rate.take(1) is not None
    rate.give_back(1), rate.give_back(1), rate.give_back(1)
    assert rate.take(1) is None and rate.take(1) is None and rate.take(1) is not None

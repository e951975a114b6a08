"""The gateway's per-rollout engine clock: parallel calls count once, open calls up to now."""

from __future__ import annotations

from gateway.engine.clock import EngineClock


class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_sequential_calls_add_up_and_gaps_do_not_count():
    t = ManualClock()
    clock = EngineClock(t)
    with clock.timing(1):
        t.now = 3.0
    t.now = 10.0  # the agent's own time
    with clock.timing(1):
        t.now = 12.0
    assert clock.seconds(1) == 5.0


def test_parallel_calls_count_once():
    t = ManualClock()
    clock = EngineClock(t)
    with clock.timing(1):
        with clock.timing(1):
            t.now = 4.0
        t.now = 6.0
    assert clock.seconds(1) == 6.0


def test_a_call_in_flight_counts_up_to_now_and_rollouts_are_apart():
    t = ManualClock()
    clock = EngineClock(t)
    with clock.timing(1):
        t.now = 7.0
        assert clock.seconds(1) == 7.0
        assert clock.seconds(2) == 0.0
    clock.forget(1)
    assert clock.seconds(1) == 0.0

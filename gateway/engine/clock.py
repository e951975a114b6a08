"""How long each rollout has waited on the engine, in-flight calls included.

The runner charges an agent its wall time minus this (rollouts/budget.py): a slow CPU engine's
prefill is the hardware's time, not the agent's. Parallel calls of one rollout count once (the union
of their intervals), so an agent cannot stretch its budget by calling the model many times at once.
Kept in memory per gateway process; a rollout's entry goes when the rollout ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class _Busy:
    done_s: float = 0.0  # closed busy intervals
    open_calls: int = 0
    since: float = 0.0  # start of the current busy interval, when open_calls > 0


class EngineClock:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock, self._rollouts = clock, {}

    @contextmanager
    def timing(self, rollout_id: int) -> Iterator[None]:
        busy = self._rollouts.setdefault(rollout_id, _Busy())
        if busy.open_calls == 0:
            busy.since = self._clock()
        busy.open_calls += 1
        try:
            yield
        finally:
            busy.open_calls -= 1
            if busy.open_calls == 0:
                busy.done_s += self._clock() - busy.since

    def seconds(self, rollout_id: int) -> float:
        """Engine time of the rollout so far (s), the open interval up to now included."""
        busy = self._rollouts.get(rollout_id)
        if busy is None:
            return 0.0
        return busy.done_s + (self._clock() - busy.since if busy.open_calls else 0.0)

    def forget(self, rollout_id: int) -> None:
        self._rollouts.pop(rollout_id, None)

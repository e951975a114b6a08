"""How long an agent may run: its own time is the task's budget; the engine's time is the engine's.

A task's agent timeout (Harbor's ``[agent] timeout_sec``, the JSONL ``timeout_s``) is written for a
fast model endpoint. On a CPU engine a single 8k-token prefill takes minutes, so a fixed wall-clock
limit measures the hardware, not the agent. The runner therefore charges the agent its wall time
minus the time its model calls spent in the engine (queued, prefilling, decoding: the union of
its calls' intervals, as the gateway measures them), against the task's budget, and stops any
rollout at a hard wall-clock ceiling (``wall_factor`` times the budget) whatever the engine does.
A stopped rollout says which limit it hit and by how much.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
DEFAULT_WALL_FACTOR = 10.0  # the wall-clock ceiling, in multiples of the task's agent budget


class BudgetExceeded(RuntimeError):
    """The agent ran out of its own time; the message says by how much."""


@dataclass(frozen=True)
class AgentBudget:
    agent_s: float  # the task's budget for the agent's own time (s)
    ceiling_s: float  # wall-clock limit, engine time included (s)
    poll_s: float = 2.0  # how often the runner asks the gateway for the engine time (s)

    @classmethod
    def for_timeout(cls, agent_timeout_s: float, wall_factor: float = DEFAULT_WALL_FACTOR) -> AgentBudget:
        return cls(
            agent_s=agent_timeout_s,
            ceiling_s=agent_timeout_s * max(1.0, wall_factor),
            poll_s=min(2.0, max(0.05, agent_timeout_s / 20)),
        )

    def overrun(self, wall_s: float, engine_s: float) -> str | None:
        """Why the agent must stop now, or None. ``engine_s``: its calls' time in the engine."""
        agent_s = max(0.0, wall_s - engine_s)
        if agent_s > self.agent_s:
            return (
                f"agent timed out: {agent_s:.0f} s of agent time, {agent_s - self.agent_s:.0f} s over the "
                f"task's {self.agent_s:.0f} s budget ({wall_s:.0f} s wall, {engine_s:.0f} s in model calls)"
            )
        if wall_s >= self.ceiling_s:
            return self.ceiling_message(wall_s, engine_s)
        return None

    def ceiling_message(self, wall_s: float, engine_s: float | None = None) -> str:
        spent = "" if engine_s is None else f", {engine_s:.0f} s of it in model calls"
        return (
            f"agent timed out: {wall_s:.0f} s wall time reached the {self.ceiling_s:.0f} s ceiling "
            f"({self.ceiling_s / self.agent_s:.0f}x the task's {self.agent_s:.0f} s budget{spent}); "
            f"raise it with --wall-factor"
        )


async def run_within(
    budget: AgentBudget,
    work: Awaitable[T],
    engine_seconds: Callable[[], Awaitable[float]],
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Await ``work`` unless the agent overruns ``budget``: then cancel it and raise BudgetExceeded.

    ``engine_seconds`` reports the rollout's engine time so far; when it fails, the last value stands.
    """
    start = clock()
    task = asyncio.ensure_future(work)
    engine_s = 0.0
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=budget.poll_s)
            if done:
                return task.result()
            with contextlib.suppress(RuntimeError, OSError):  # the gateway is briefly away: keep the last value
                engine_s = await engine_seconds()
            reason = budget.overrun(clock() - start, engine_s)
            if reason is not None:
                raise BudgetExceeded(reason)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

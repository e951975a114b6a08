"""Python reward functions given as ``module:function`` (sync or async; may return None).

A function receives keyword arguments ``task`` (the Task), ``rollout`` (the gateway's rollout view),
``verdict`` (the verifier's Verdict) and ``outcome`` (the agent's AgentOutcome), and returns a float
or None ("no opinion"); it may accept only the ones it needs.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

from harnesses.openenv.rewards import is_rubric, rubric_reward


@dataclass(frozen=True)
class RewardFunction:
    name: str  # "module:function", the component's name in the rollout's rewards
    function: Callable

    async def __call__(self, **context) -> float | None:
        accepted = inspect.signature(self.function).parameters
        takes_all = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
        kwargs = context if takes_all else {k: v for k, v in context.items() if k in accepted}
        value = self.function(**kwargs)
        if inspect.isawaitable(value):
            value = await value
        if value is None:
            return None
        if not math.isfinite(reward := float(value)):  # the gateway would refuse it
            raise ValueError(f"reward function {self.name} returned {value!r}, not a finite number")
        return reward


def load_reward_function(spec: str) -> RewardFunction:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"reward function {spec!r} is not module:function")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load reward function {spec!r}: {exc}") from None
    if is_rubric(function):  # an OpenEnv Rubric, called with (final answer, observation)
        function = rubric_reward(function)
    if not callable(function):
        raise ValueError(f"{spec!r} is not callable")
    return RewardFunction(spec, function)

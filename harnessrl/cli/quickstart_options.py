"""The options of `harnessrl quickstart` that no other command has, each declared once with the config key it
sets (``Sets``; the defaults are ``QuickstartConfig``'s, harnessrl/config/jobs.py). Those it shares with `run`
are in ``harnessrl.cli.job_options``, the store's, sandbox's and tasks' in ``harnessrl.cli.options``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harnesses.registry import agent_names, harness_help
from harnessrl.cli.options import Sets
from harnessrl.config.files import defaults, field_bounds
from harnessrl.config.jobs import QuickstartConfig
from store.capture_modes import DEFAULT_CAPTURE, capture_help

QUICKSTART = defaults(QuickstartConfig)  # what `quickstart` shows as its defaults


def _bounds(key: str) -> dict[str, float]:
    return field_bounds(QuickstartConfig, key)


Minutes = Annotated[float, typer.Option(help="Start rollouts for this long", **_bounds("minutes")), Sets("minutes")]
UntilVersion = Annotated[
    int,
    typer.Option(
        help="And go on past --minutes until the learner has published this version (a step count)",
        **_bounds("until_version"),
    ),
    Sets("until_version"),
]
QuickstartRun = Annotated[str, typer.Option(help="The run's name"), Sets("run")]
Model = Annotated[Path | None, typer.Option(help="Model folder [default: SmolLM2, prepared]"), Sets("engine.model")]
EvalEvery = Annotated[
    int,
    typer.Option(
        help="Evaluate on the held-out (test) split: the base model, then every N versions and the "
        "last, into the run <run>-eval (0: off)",
        **_bounds("evaluation.every"),
    ),
    Sets("evaluation.every"),
]
EvalK = Annotated[
    int,
    typer.Option(help="Rollouts per held-out task per evaluation", **_bounds("evaluation.k")),
    Sets("evaluation.k"),
]
UnseenTasks = Annotated[
    str | None,
    typer.Option(
        help="With --eval-every: tasks of a kind never trained on (builtin:shell-unseen), evaluated beside the "
        "held-out split into <run>-unseen-eval"
    ),
    Sets("evaluation.unseen_tasks"),
]
QuickstartHarness = Annotated[
    str,
    typer.Option(
        help="The agent: " + harness_help(agent_names()) + " (builtin: one-shot; the others: real CLI agents)"
    ),
    Sets("harness"),
]
OwnGateway = Annotated[
    str | None,
    typer.Option(
        help="Train through this running gateway (`harnessrl serve`, on the same --database-url and model) "
        "instead of starting vLLM and a gateway: quickstarts of several policies share one engine"
    ),
    Sets("gateway.url"),
]
CallMaxTokens = Annotated[
    int,
    typer.Option(help="A CLI agent's max tokens per model call", **_bounds("call_max_tokens")),
    Sets("call_max_tokens"),
]
TrainTemperature = Annotated[
    float | None,
    typer.Option(
        help="Sampling temperature of the GRPO rounds (above 1 keeps a near-certain SFT policy exploring) "
        "[default: the agent's, 1.0; evaluation always uses the agent's]",
        **_bounds("train_temperature"),
    ),
    Sets("train_temperature"),
]
EngineGpuMemory = Annotated[
    float | None,
    typer.Option(
        help="On a GPU: vLLM's share of its memory; the learner uses the rest", **_bounds("engine.gpu_memory")
    ),
    Sets("engine.gpu_memory"),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option(
        help="The engine's context [default: 2048; a CLI agent's first prompt + 2 answers + 1k]",
        **_bounds("engine.max_model_len"),
    ),
    Sets("engine.max_model_len"),
]
QuickstartCapture = Annotated[
    str | None,
    typer.Option(help=f"How the policy's runs are captured: {capture_help()} [default: {DEFAULT_CAPTURE}]"),
    Sets("capture"),
]
TaskSampling = Annotated[
    str,
    typer.Option(
        help="Which tasks a GRPO round plays: pass (every task once) or learnable (rounds of the learner's "
        "backlog, drawn by each task family's chance of a reward spread from its last rollouts)"
    ),
    Sets("task_sampling"),
]
LearnerMetricsPort = Annotated[
    int | None,
    typer.Option(help="Port of the learner's Prometheus /metrics on 127.0.0.1 [default: a free one; 0: off]"),
    Sets("learner.metrics_port"),
]
WarmStart = Annotated[
    bool,
    typer.Option(
        help="First a warm-up run (<run>-warmup: a teacher's with --upstream, else the policy's best of "
        "--warm-up-group-size), SFT on its successes published as the next version, then GRPO from it"
    ),
    Sets("warm_start.enabled"),
]
WarmUpRounds = Annotated[
    int, typer.Option(help="Warm-up passes over the tasks", **_bounds("warm_start.rounds")), Sets("warm_start.rounds")
]
WarmUpGroupSize = Annotated[
    int,
    typer.Option(help="G of the policy's best-of-G warm-up", **_bounds("warm_start.group_size")),
    Sets("warm_start.group_size"),
]
SftEpochs = Annotated[
    int,
    typer.Option(help="SFT passes over the warm-up's successes", **_bounds("warm_start.sft_epochs")),
    Sets("warm_start.sft_epochs"),
]
SftLr = Annotated[
    float, typer.Option(help="SFT learning rate (LoRA)", **_bounds("warm_start.sft_lr")), Sets("warm_start.sft_lr")
]
Lr = Annotated[
    float | None,
    typer.Option(
        help="GRPO's learning rate (LoRA) [default: 5e-4 from a fresh LoRA, 1e-4 after --warm-start, "
        "where 5e-4 was measured to collapse the SFT policy]",
        **_bounds("learner.lr"),
    ),
    Sets("learner.lr"),
]

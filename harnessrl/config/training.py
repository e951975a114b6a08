"""The sections of a job that trains on this machine (`harnessrl quickstart`): the engine it starts, what it
sets of the learner, held-out evaluations while training, and a warm start before GRPO. As in
``harnessrl.config.sections``, each key is its command-line option, declared here once."""

from __future__ import annotations

from pydantic import Field

from harnessrl.config.files import LoosePath, Section, cli
from harnessrl.config.sections import TasksConfig


class QuickstartTasksConfig(TasksConfig):
    source: str = "builtin:arithmetic"
    split: str = "train"  # the split trained on; evaluations play the test split


class EngineConfig(Section):
    """The vLLM server a job starts (harnessrl/engine/process.py) and the model it serves."""

    model: LoosePath | None = Field(
        None, description="Model folder [default: SmolLM2, prepared]", json_schema_extra=cli("--model")
    )
    max_model_len: int | None = Field(
        None, ge=256, description="The engine's context [default: 2048; a CLI agent's first prompt + 2 answers + 1k]"
    )
    gpu_memory: float | None = Field(
        None,
        ge=0.05,
        le=0.95,
        description="On a GPU: vLLM's share of its memory; the learner uses the rest",
        json_schema_extra=cli("--engine-gpu-memory"),
    )


class LearnerSection(Section):
    """What a job sets of the learner it starts (the rest: learner/config.py's defaults)."""

    lr: float | None = Field(
        None,
        ge=0.0,
        description="GRPO's learning rate (LoRA) [default: 5e-4 from a fresh LoRA, 1e-4 after --warm-start, "
        "where 5e-4 was measured to collapse the SFT policy]",
    )
    echo_weight: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="The learner's [loss] echo_weight: ECHO, a cross-entropy term on the tool results' tokens "
        "beside GRPO (0: off)",
        json_schema_extra=cli("--echo-weight"),
    )
    metrics_port: int | None = Field(
        None,
        description="Port of the learner's Prometheus /metrics on 127.0.0.1 [default: a free one; 0: off]",
        json_schema_extra=cli("--learner-metrics-port"),
    )
    folder: LoosePath | None = Field(
        None,
        description="With --gateway: hand the run to the server's one learner (`harnessrl train --run RUN "
        "--settings-dir FOLDER`, every policy's) through this folder instead of starting a learner of its own",
        json_schema_extra=cli("--learner-folder"),
    )


class EvaluationConfig(Section):
    """Held-out evaluation while training (harnessrl/evaluation/periodic.py): the base model, then every
    ``every`` versions and the last, ``k`` rollouts per held-out task, into the run <run>-eval."""

    every: int = Field(
        0,
        ge=0,
        description="Evaluate on the held-out (test) split: the base model, then every N versions and the last, "
        "into the run <run>-eval (0: off)",
        json_schema_extra=cli("--eval-every"),
    )
    k: int = Field(4, ge=1, description="Rollouts per held-out task per evaluation", json_schema_extra=cli("--eval-k"))
    unseen_tasks: str | None = Field(
        None,
        description="With --eval-every: tasks of a kind never trained on (builtin:shell-unseen), evaluated beside "
        "the held-out split into <run>-unseen-eval",
    )


class WarmStartConfig(Section):
    """A warm-up run and SFT on its successes before GRPO (harnessrl/training/warm_start.py)."""

    enabled: bool = Field(
        False,
        description="First a warm-up run (<run>-warmup: a teacher's with --upstream, else the policy's best of "
        "--warm-up-group-size), SFT on its successes published as the next version, then GRPO from it",
        json_schema_extra=cli("--warm-start"),
    )
    rounds: int = Field(1, ge=1, description="Warm-up passes over the tasks", json_schema_extra=cli("--warm-up-rounds"))
    group_size: int = Field(
        8, ge=1, description="G of the policy's best-of-G warm-up", json_schema_extra=cli("--warm-up-group-size")
    )
    sft_epochs: int = Field(4, ge=1, description="SFT passes over the warm-up's successes")
    sft_lr: float = Field(5e-4, ge=0.0, description="SFT learning rate (LoRA)")

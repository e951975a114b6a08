"""`quickstart --warm-start`: an imitation phase before GRPO, for task families the base model fails.

A policy that never succeeds gives GRPO no signal (every group's rewards are equal). The warm start
runs three phases on the quickstart's engine, gateway and store:

1. **warm-up**: the tasks into the run ``<run>-warmup``, served either by a teacher (a litellm model
   through ``harnessrl.teachers.teacher``'s engine and a gateway of its own, or ``solutions``: the tasks'
   reference solutions played as the agent's own tool calls, ``harnessrl.teachers.demonstrations``) or by the
   policy itself with a larger group (best of G: rejection sampling finds the rare successes);
2. **sft**: ``harnessrl.training.sft`` on that run's successes (the best of each group for a policy run),
   published on the quickstart's gateway as the next policy version, which new rollouts get;
3. **grpo**: the learner starts from the SFT adapter (``init_adapter``) at its version
   (``init_version``) and trains on the run ``<run>`` as a plain quickstart does.

The names tie the runs together: ``harnessrl report --run <run>`` finds ``<run>-warmup`` and plots
the phases (``warm_start.png``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harnessrl.training.sft import SftOutcome, SftPlan
from learner.config import LearnerConfig
from learner.sft import SftConfig

WARMUP_SUFFIX = "-warmup"


def warm_up_run(run: str) -> str:
    """The run a quickstart's warm-up phase records into."""
    return run + WARMUP_SUFFIX


@dataclass(frozen=True)
class WarmStart:
    teacher: str | None = None  # litellm model string; None: the policy's own best of G
    teacher_base_url: str | None = None  # the teacher's API base (hosted_vllm/...)
    rounds: int = 1  # passes over the tasks in the warm-up phase
    group_size: int = 8  # G of the policy's best-of-G pass (a teacher run uses the quickstart's G)
    min_reward: float = 1.0  # a rollout at least this good is a success to imitate
    epochs: int = 4  # SFT passes over the successes
    lr: float = 5e-4  # SFT learning rate

    @property
    def label(self) -> str:
        return f"teacher {self.teacher}" if self.teacher else f"best of {self.group_size}"


@dataclass(frozen=True)
class WarmStartResult:
    adapter: Path  # the SFT adapter folder GRPO starts from
    version: int  # the policy version it is served as
    rollouts: int  # successes trained on


def sft_plan(
    warm: WarmStart,
    run: str,
    learner: LearnerConfig,
    database_url: str,
    out_dir: Path,
    gateway_url: str,
    admin_key: str,
    token_budget: int,
) -> SftPlan:
    """SFT on the warm-up run's successes, published on the quickstart's gateway. ``learner``: the model
    and LoRA shape GRPO trains next (it continues the SFT adapter); the warm start's lr replaces its own."""
    return SftPlan(
        run=warm_up_run(run),
        database_url=database_url,
        learner=learner.updated(optimizer={"lr": warm.lr}),
        out_dir=out_dir,
        sft=SftConfig(epochs=warm.epochs, token_budget=token_budget),
        min_reward=warm.min_reward,
        best_of_group=warm.teacher is None,
        gateway_url=gateway_url,
        admin_key=admin_key,
    )


def result_of(outcome: SftOutcome) -> WarmStartResult:
    if outcome.version is None:
        raise ValueError("the SFT adapter was not published")
    return WarmStartResult(outcome.adapter, outcome.version, outcome.rollouts)


def learner_keys(result: WarmStartResult | None) -> dict:
    """Learner config keys continuing from the warm start (none without one), as ``LearnerConfig.updated``
    takes them."""
    return {} if result is None else {"lora": {"init_adapter": str(result.adapter), "init_version": result.version}}

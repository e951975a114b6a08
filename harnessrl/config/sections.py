"""The sections jobs share: which tasks, where rollouts run, the gateway and the store they talk to, the judge,
a teacher, sampling, and a run's workers. Each is one TOML table; a job picks the ones it has
(``harnessrl.config.jobs``), and a job whose defaults differ derives its own section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from harnesses.budget import DEFAULT_WALL_FACTOR
from harnesses.slot_leases import DEFAULT_LEASE_S
from harnessrl.config.files import LoosePath, Section

DEFAULT_GATEWAY = "http://127.0.0.1:8000"


class TasksConfig(Section):
    """Which tasks a job plays (harnesses/datasets.py): --tasks and the selection options."""

    source: str  # a folder, a .jsonl, a list file, builtin:NAME, openenv:SPEC, harbor:SPEC, hf:ORG/NAME
    include: list[str] = []  # task name globs
    exclude: list[str] = []
    split: str = "all"  # all | train | test (harnesses.datasets.Selection checks it)
    test_fraction: float = Field(0.2, ge=0.0, le=1.0)

    def selection(self):
        """As ``harnesses.datasets.Selection``; TaskError naming the option when it is not one."""
        from harnesses.datasets import Selection

        return Selection(tuple(self.include), tuple(self.exclude), self.split, self.test_fraction)


class EvalTasksConfig(TasksConfig):
    source: str = "builtin:arithmetic"
    split: str = "test"


class SandboxKindConfig(Section):
    """Where rollouts run (sandboxes/kinds.py)."""

    kind: str = "local"  # local | docker | harbor:<type>
    options: dict[str, Any] = {}  # harbor:<type>'s environment options (--sandbox-option key=value)


class SandboxConfig(SandboxKindConfig):
    """Where rollouts run and each sandbox's limits."""

    memory_gib: float = 2.0  # per sandbox
    wall_factor: float = Field(DEFAULT_WALL_FACTOR, ge=1.0)  # wall-clock ceiling, x the task's agent budget
    allow_unisolated: bool = False  # local without bubblewrap: plain subprocesses (trusted agents only)

    def spec(self):
        """The limits every sandbox of the job shares (``sandboxes.SandboxSpec``)."""
        from sandboxes import Limits, SandboxSpec

        return SandboxSpec(limits=Limits(memory_bytes=int(self.memory_gib * 2**30), cpus=1.0))


class RunSandboxConfig(SandboxConfig):
    allow_internet: bool = False  # tasks whose task.toml asks for it get the host's network
    gateway: str | None = None  # the URL sandboxes reach the gateway by [default: the gateway's]


class GatewayConfig(Section):
    url: str = DEFAULT_GATEWAY
    admin_key: str | None = Field(None, exclude=True, repr=False)  # a secret: never printed nor stored


class OwnGatewayConfig(GatewayConfig):
    url: str | None = None  # a running `harnessrl serve`; None: the job starts vLLM and a gateway of its own


class StoreConfig(Section):
    url: str | None = None  # sqlite:///PATH or postgresql://...; None: SQLite under $HARNESSRL_HOME


class JudgeConfig(Section):
    """An LLM judge adding the reward component ``judge`` (harnesses/judge.py); no model: no judge."""

    model: str | None = None  # a litellm model string
    rubric: LoosePath | None = None
    mode: str = "rollout"  # rollout | group (JudgeSettings checks it)
    base_url: str | None = None
    concurrency: int = Field(4, ge=1)  # judge calls at once
    timeout_s: float = Field(120.0, ge=1.0)  # per judge call

    def settings(self):
        """The judge asked for (None without a model); ValueError naming the missing or bad option."""
        from harnesses.judge import JudgeSettings
        from harnesses.rubric import load_rubric
        from harnessrl.settings import data_home

        if self.model is None:
            if self.rubric is not None:
                raise ValueError("--rubric needs --judge MODEL (a litellm model string)")
            return None
        if self.rubric is None:
            raise ValueError("--judge needs --rubric FILE: the text the judge scores by")
        return JudgeSettings(
            model=self.model,
            rubric=load_rubric(self.rubric),
            mode=self.mode,
            api_base=self.base_url,
            concurrency=self.concurrency,
            timeout_s=self.timeout_s,
            cache_dir=data_home() / "judge-cache",
        )


class RolloutJudgeConfig(JudgeConfig):
    mode: Literal["rollout"] = "rollout"  # the job's rollouts are judged one at a time


class TeacherConfig(Section):
    """A teacher model served through a gateway of its own on the store (harnessrl.engines.teacher)."""

    base_url: str | None = None  # its API base (hosted_vllm/...)
    policy_model: LoosePath | None = None  # the policy's model folder, whose tokenizer records the calls


class RunTeacherConfig(TeacherConfig):
    model: str | None = None  # --upstream: a litellm model string, or solutions; None: the policy serves


class WarmStartTeacherConfig(Section):
    """A warm start's teacher (harnessrl.engines.teacher); no model: the policy's own best of G."""

    model: str | None = None  # --upstream: a litellm model string, or solutions
    base_url: str | None = None  # its API base (hosted_vllm/...)


class SamplingConfig(Section):
    """A new run's sampling, applied to every call; None leaves it to the run (or the defaults, 1.0)."""

    temperature: float | None = Field(None, ge=0.01, le=2.0)
    top_p: float | None = Field(None, ge=0.01, le=1.0)

    def request(self) -> dict | None:
        """As POST /api/rollouts takes it."""
        asked = {"temperature": self.temperature, "top_p": self.top_p}
        return {name: value for name, value in asked.items() if value is not None} or None


class EvalSamplingConfig(Section):
    temperature: float = Field(1.0, ge=0.0, le=2.0)  # 0: greedy

    def request(self) -> dict:
        return {"temperature": self.temperature, "top_p": 1.0}


class WorkersConfig(Section):
    """This runner among the run's runners (harnesses/slot_leases.py)."""

    worker_id: str = ""  # "": HOST-PID-RANDOM
    lease_s: float = Field(DEFAULT_LEASE_S, ge=1.0, le=3600.0)


class QuickstartTasksConfig(TasksConfig):
    source: str = "builtin:arithmetic"
    split: str = "train"  # the split trained on; evaluations play the test split


class EngineConfig(Section):
    """The vLLM server a job starts (harnessrl/engines/process.py) and the model it serves."""

    model: LoosePath | None = None  # a model folder; None: SmolLM2, prepared (stretched for a long first prompt)
    max_model_len: int | None = Field(None, ge=256)  # None: 2048, or a CLI agent's first prompt + 2 answers + 1k
    gpu_memory: float | None = Field(None, ge=0.05, le=0.95)  # on a GPU: vLLM's share, the learner's the rest


class LearnerSection(Section):
    """What a job sets of the learner it starts (the rest: learner/config.py's defaults)."""

    lr: float | None = Field(None, ge=0.0)  # GRPO's; None: 5e-4 from a fresh LoRA, 1e-4 after a warm start
    metrics_port: int | None = None  # Prometheus /metrics on 127.0.0.1; None: a free port; 0: off


class EvaluationConfig(Section):
    """Held-out evaluation while training (harnessrl/evaluation/periodic.py): the base model, then every
    ``every`` versions and the last, ``k`` rollouts per held-out task, into the run <run>-eval."""

    every: int = Field(0, ge=0)  # 0: off
    k: int = Field(4, ge=1)
    unseen_tasks: str | None = None  # a kind of task never trained on, evaluated into <run>-unseen-eval


class WarmStartConfig(Section):
    """A warm-up run and SFT on its successes before GRPO (harnessrl/training/warm_start.py)."""

    enabled: bool = False
    rounds: int = Field(1, ge=1)  # warm-up passes over the tasks
    group_size: int = Field(8, ge=1)  # G of the policy's best-of-G warm-up (a teacher's uses the job's G)
    sft_epochs: int = Field(4, ge=1)
    sft_lr: float = Field(5e-4, ge=0.0)

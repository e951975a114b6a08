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


class SandboxConfig(Section):
    """Where rollouts run (sandboxes/kinds.py) and each sandbox's limits."""

    kind: str = "local"  # local | docker | harbor:<type>
    options: dict[str, Any] = {}  # harbor:<type>'s environment options (--sandbox-option key=value)
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

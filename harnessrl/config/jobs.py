"""One config per job: ``RunConfig`` (`harnessrl run`) and ``EvalConfig`` (`harnessrl eval`), each its own
keys and the sections it shares with the others (``harnessrl.config.sections``)."""

from __future__ import annotations

from pydantic import Field

from harnessrl.config.files import LoosePath, Section
from harnessrl.config.sections import (
    EvalSamplingConfig,
    EvalTasksConfig,
    GatewayConfig,
    JudgeConfig,
    RolloutJudgeConfig,
    RunSandboxConfig,
    RunTeacherConfig,
    SamplingConfig,
    SandboxConfig,
    StoreConfig,
    TasksConfig,
    TeacherConfig,
    WorkersConfig,
)


class RunConfig(Section):
    """G rollouts of a harness on every task, by the policy or a teacher (harnesses/launch.py)."""

    tasks: TasksConfig  # first: a command line missing both names --tasks first, as it always did
    run: str  # rerunning the same run resumes it
    harness: str = "builtin"
    policy: str | None = None  # the policy the run trains and is served; None: the harness's name
    group_size: int = Field(4, ge=1)  # G
    concurrency: int = Field(4, ge=1)  # rollouts at once
    capture: str | None = None  # a new run's capture mode (store/capture_modes.py)
    rewards: list[str] = []  # module:function reward components
    sandbox: RunSandboxConfig = RunSandboxConfig()
    sampling: SamplingConfig = SamplingConfig()
    gateway: GatewayConfig = GatewayConfig()
    store: StoreConfig = StoreConfig()
    judge: JudgeConfig = JudgeConfig()
    teacher: RunTeacherConfig = RunTeacherConfig()
    workers: WorkersConfig = WorkersConfig()


class EvalConfig(Section):
    """k rollouts per task per policy, each pinned to its policy (harnessrl/evaluation/)."""

    run: str | None = None  # None: eval-<time>
    harness: str = "builtin"  # oneshot: the builtin agent as quickstart runs it
    policies: list[str] = ["base", "latest"]  # pins; teacher:MODEL is a teacher
    policy: str | None = None  # the policy base and latest name; None: the server's default
    k: int = Field(8, ge=1)  # rollouts per task per policy
    concurrency: int = Field(4, ge=1)  # all policies together
    out: LoosePath | None = None  # eval.json and eval.png; None: $HARNESSRL_HOME/eval/<run>
    tasks: EvalTasksConfig = EvalTasksConfig()
    sandbox: SandboxConfig = SandboxConfig()
    sampling: EvalSamplingConfig = EvalSamplingConfig()
    gateway: GatewayConfig = GatewayConfig()
    store: StoreConfig = StoreConfig()
    judge: RolloutJudgeConfig = RolloutJudgeConfig()
    teacher: TeacherConfig = TeacherConfig()

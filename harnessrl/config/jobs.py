"""One config per job: ``RunConfig`` (`harnessrl run`), ``EvalConfig`` (`harnessrl eval`) and
``QuickstartConfig`` (`harnessrl quickstart`), each its own keys and the sections it shares with the others
(``harnessrl.config.sections``). `harnessrl train`'s is the learner's (learner/config_file.py)."""

from __future__ import annotations

from pydantic import Field

from harnessrl.config.files import LoosePath, Section
from harnessrl.config.sections import (
    EngineConfig,
    EvalSamplingConfig,
    EvalTasksConfig,
    EvaluationConfig,
    GatewayConfig,
    JudgeConfig,
    LearnerSection,
    OwnGatewayConfig,
    QuickstartTasksConfig,
    RolloutJudgeConfig,
    RunSandboxConfig,
    RunTeacherConfig,
    SamplingConfig,
    SandboxConfig,
    SandboxKindConfig,
    StoreConfig,
    TasksConfig,
    TeacherConfig,
    WarmStartConfig,
    WarmStartTeacherConfig,
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


class QuickstartConfig(Section):
    """Engine, gateway, rollouts and the learner on this machine (harnessrl/training/quickstart.py): GRPO
    rounds of a harness on the train split, an optional warm start before them, held-out evaluations."""

    run: str = "quickstart"
    harness: str = "builtin"  # builtin (one-shot) or a CLI agent (harnesses/agents/)
    policy: str | None = None  # the policy it trains, serves and evaluates; None: the harness's name
    minutes: float = Field(14.0, ge=0.0)  # rollouts start for this long
    until_version: int = Field(0, ge=0)  # and go on until the learner has published this version
    group_size: int = Field(4, ge=1)  # G
    concurrency: int = Field(8, ge=1)  # rollouts at once
    capture: str | None = None  # the policy's runs' capture mode (store/capture_modes.py); None: the gateway's
    call_max_tokens: int = Field(256, ge=16)  # a CLI agent's max tokens per model call
    train_temperature: float | None = Field(None, ge=0.05, le=2.0)  # the GRPO rounds'; None: the agent's
    task_sampling: str = "pass"  # pass | learnable (harnessrl.training.curriculum.TaskSampling)
    tasks: QuickstartTasksConfig = QuickstartTasksConfig()
    engine: EngineConfig = EngineConfig()
    learner: LearnerSection = LearnerSection()
    evaluation: EvaluationConfig = EvaluationConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    teacher: WarmStartTeacherConfig = WarmStartTeacherConfig()
    sandbox: SandboxKindConfig = SandboxKindConfig()
    gateway: OwnGatewayConfig = OwnGatewayConfig()
    store: StoreConfig = StoreConfig()
    judge: JudgeConfig = JudgeConfig()

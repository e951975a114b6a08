"""One config per job: ``RunConfig`` (`harnessrl run`), ``EvalConfig`` (`harnessrl eval`) and
``QuickstartConfig`` (`harnessrl quickstart`), each its own keys and the sections it shares with the others
(``harnessrl.config.sections``, ``harnessrl.config.training``). `harnessrl train`'s is the learner's
settings and its own keys (``harnessrl.config.train``); `serve`'s, `sft`'s and `ls`'s are in
``harnessrl.config.serve``, ``harnessrl.config.sft`` and ``harnessrl.config.listing``. Each key is its command's
option (its help the field's description)."""

from __future__ import annotations

from pydantic import Field

from harnesses.registry import agent_names, harness_help
from harnessrl.config.files import LoosePath, Section, cli
from harnessrl.config.sections import (
    EvalSamplingConfig,
    EvalTasksConfig,
    GatewayConfig,
    JudgeConfig,
    OwnGatewayConfig,
    PolicyName,
    RolloutJudgeConfig,
    RunSandboxConfig,
    RunTeacherConfig,
    SamplingConfig,
    SandboxConfig,
    SandboxKindConfig,
    StoreConfig,
    TasksConfig,
    TeacherConfig,
    WarmStartTeacherConfig,
    WorkersConfig,
)
from harnessrl.config.training import (
    EngineConfig,
    EvaluationConfig,
    LearnerSection,
    QuickstartTasksConfig,
    WarmStartConfig,
)
from store.capture_modes import DEFAULT_CAPTURE, CaptureMode, capture_help

HARNESS_HELP = harness_help() + " (oneshot: the builtin agent as quickstart runs it, one reply, no tools)"
POLICY_HELP = "The policy (named adapter lineage) {what}; a new name starts one [default: the harness's name]"


class RunConfig(Section):
    """G rollouts of a harness on every task, by the policy or a teacher (rollouts/launch.py)."""

    tasks: TasksConfig  # first: a command line missing both names --tasks first, as it always did
    run: str = Field(description="The run's name; rerunning the same command resumes it")
    harness: str = Field("builtin", description=HARNESS_HELP)
    policy: PolicyName | None = Field(None, description=POLICY_HELP.format(what="the run trains and is served"))
    group_size: int = Field(4, ge=1, description="G: rollouts per task (one GRPO group)")
    concurrency: int = Field(4, ge=1, description="Rollouts at once")
    capture: CaptureMode | None = Field(None, description=capture_help() + ", for a new run")
    rewards: list[str] = Field([], description="module:function, repeatable", json_schema_extra=cli("--reward"))
    sandbox: RunSandboxConfig = RunSandboxConfig()
    sampling: SamplingConfig = SamplingConfig()
    gateway: GatewayConfig = GatewayConfig()
    store: StoreConfig = StoreConfig()
    judge: JudgeConfig = JudgeConfig()
    teacher: RunTeacherConfig = RunTeacherConfig()
    workers: WorkersConfig = WorkersConfig()


class EvalConfig(Section):
    """k rollouts per task per policy, each pinned to its policy (harnessrl/evaluation/)."""

    run: str | None = Field(  # None: eval-<time>
        None, description="The evaluation run's name; rerunning the same command resumes it [default: eval-<time>]"
    )
    harness: str = Field("builtin", description=HARNESS_HELP)  # oneshot: the builtin agent as quickstart runs it
    policies: list[str] = Field(  # pins; teacher:MODEL is a teacher
        ["base", "latest"],
        description="Comma-separated pins: base, latest (the version current at the start), POLICY@latest, "
        "POLICY@vN, POLICY-vN (e.g. pi@latest,opencode@v3; a pin without a policy names --policy's) and "
        "teacher:MODEL (a litellm model string on the same tasks and harness, through a teacher gateway on "
        "--database-url)",
        json_schema_extra=cli(given_as="comma_list"),
    )
    policy: PolicyName | None = Field(  # None: the server's default
        None, description="The policy that base and latest name [default: the server's default, policy]"
    )
    k: int = Field(8, ge=1, description="Rollouts per task per policy (pass@k)", json_schema_extra=cli(short="-k"))
    concurrency: int = Field(4, ge=1, description="Rollouts at once, all policies together")
    out: LoosePath | None = Field(
        None, description="Folder for eval.json and eval.png [default: $HARNESSRL_HOME/eval/<run>]"
    )
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

    minutes: float = Field(14.0, ge=0.0, description="Start rollouts for this long")
    until_version: int = Field(
        0, ge=0, description="And go on past --minutes until the learner has published this version (a step count)"
    )
    run: str = Field("quickstart", description="The run's name")
    harness: str = Field(
        "builtin",
        description="The agent: " + harness_help(agent_names()) + " (builtin: one-shot; the others: real CLI agents)",
    )
    policy: PolicyName | None = Field(None, description=POLICY_HELP.format(what="it trains, serves and evaluates"))
    group_size: int = Field(4, ge=1, description="G: rollouts per task (one GRPO group)")
    concurrency: int = Field(8, ge=1, description="Rollouts at once")
    capture: CaptureMode | None = Field(  # None: the gateway's
        None, description=f"How the policy's runs are captured: {capture_help()} [default: {DEFAULT_CAPTURE}]"
    )
    call_max_tokens: int = Field(256, ge=16, description="A CLI agent's max tokens per model call")
    train_temperature: float | None = Field(  # None: the agent's
        None,
        ge=0.05,
        le=2.0,
        description="Sampling temperature of the GRPO rounds (above 1 keeps a near-certain SFT policy exploring) "
        "[default: the agent's, 1.0; evaluation always uses the agent's]",
    )
    task_sampling: str = Field(  # harnessrl.training.curriculum.TaskSampling
        "pass",
        description="Which tasks a GRPO round plays: pass (every task once) or learnable (rounds of the learner's "
        "backlog, drawn by each task family's chance of a reward spread from its last rollouts)",
    )
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

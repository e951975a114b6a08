"""The sections jobs share: which tasks, where rollouts run, the gateway and the store they talk to, the judge,
a teacher, sampling, and a run's workers. Each is one TOML table; a job picks the ones it has
(``harnessrl.config.jobs``), and a job whose defaults differ derives its own section.

Each key is also its command-line option, declared here once: its help is the field's description, its flag
``--<name>`` unless ``cli(...)`` names another (harnessrl/cli/key_options.py makes the options)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PlainSerializer, PlainValidator, WithJsonSchema

from harnessrl.config.files import LoosePath, Section, cli
from rollouts.budget import DEFAULT_WALL_FACTOR
from rollouts.slot_leases import DEFAULT_LEASE_S
from sandboxes.kinds import KINDS, Kind, sandbox_kind
from sandboxes.kinds import choices as kind_choices

DEFAULT_GATEWAY = "http://127.0.0.1:8000"


def policy_name(name: str) -> str:
    """``name`` when it is a policy's name (store.policies.POLICY_NAME), else InvalidPolicyName (a ValueError)
    naming the rule."""
    from store.policies import check_policy_name  # here: the store's SQL stays out of the CLI's start

    return check_policy_name(name)


# A policy's name (store.policies.POLICY_NAME), checked when a config is read: --show-config refuses a bad one.
PolicyName = Annotated[str, AfterValidator(policy_name)]


def parsed_kind(value: Any) -> Kind:
    """The sandbox kind a config names (``sandboxes.kinds.sandbox_kind``), read once when the config is; a
    ValueError listing the kinds for another name."""
    if isinstance(value, Kind):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a sandbox kind is a string ({kind_choices()})")
    try:
        return sandbox_kind(value)
    except RuntimeError as exc:  # SandboxError
        raise ValueError(str(exc)) from None


# A sandbox kind, parsed when a config is read and passed down as the Kind; written (TOML, --show-config) by name.
SandboxKind = Annotated[
    Kind, PlainValidator(parsed_kind), PlainSerializer(str, return_type=str), WithJsonSchema({"type": "string"})
]
TASKS_HELP = (
    "A folder of Harbor tasks (nested), a .jsonl file, a list file (one path a line), or "
    "builtin:arithmetic | builtin:tasks, or resolved by OpenEnv: harbor:FOLDER | harbor:ORG/NAME | "
    "harbor:NAME@VERSION | hf:ORG/NAME"
)


class TasksConfig(Section):
    """Which tasks a job plays (harnesses/datasets.py): --tasks and the selection options."""

    source: str = Field(description=TASKS_HELP, json_schema_extra=cli("--tasks"))
    include: list[str] = Field([], description="Only tasks whose name matches this glob, repeatable")
    exclude: list[str] = Field([], description="Leave out tasks whose name matches this glob, repeatable")
    split: str = Field(
        "all",
        description="all | train | test: tasks split by a hash of their name, so training and evaluation never "
        "share one",
    )
    test_fraction: float = Field(0.2, ge=0.0, le=1.0, description="Share of task names in the test split")

    def selection(self):
        """As ``harnesses.datasets.Selection``; TaskError naming the option when it is not one."""
        from harnesses.datasets import Selection

        return Selection(tuple(self.include), tuple(self.exclude), self.split, self.test_fraction)


class EvalTasksConfig(TasksConfig):
    source: str = "builtin:arithmetic"
    split: str = "test"


class SandboxKindConfig(Section):
    """Where rollouts run (sandboxes/kinds.py)."""

    kind: SandboxKind = Field(
        KINDS["local"],
        description=f"{kind_choices()}: an environment type of Harbor's (podman, daytona, modal, e2b, gke, ...; "
        "docs/running.md)",
        json_schema_extra=cli("--sandbox"),
    )
    options: dict[str, Any] = Field(
        {},
        description="key=value, repeatable: an option of the harbor:<type> environment (Harbor's kwargs; a JSON "
        "value is decoded), e.g. extra_docker_compose='[\"net.yaml\"]'",
        json_schema_extra=cli("--sandbox-option", given_as="pairs"),
    )


class SandboxConfig(SandboxKindConfig):
    """Where rollouts run and each sandbox's limits."""

    memory_gib: float = Field(2.0, description="Memory limit per sandbox")
    wall_factor: float = Field(
        DEFAULT_WALL_FACTOR,
        ge=1.0,
        description="Wall-clock ceiling per rollout, in multiples of the task's agent budget (the budget counts "
        "the agent's own time; time in model calls is the engine's)",
    )
    allow_unisolated: bool = Field(
        False,
        description="Without bubblewrap, run local sandboxes as plain subprocesses: the agent sees this user's "
        "files and network (trusted agents only)",
    )

    def spec(self):
        """The limits every sandbox of the job shares (``sandboxes.SandboxSpec``)."""
        from sandboxes import Limits, SandboxSpec

        return SandboxSpec(limits=Limits(memory_bytes=int(self.memory_gib * 2**30), cpus=1.0))


class RunSandboxConfig(SandboxConfig):
    allow_internet: bool = Field(
        False, description="Give tasks whose task.toml says allow_internet = true the host's network (else refused)"
    )
    gateway: str | None = Field(
        None,
        description="The URL sandboxes reach the gateway by, through this worker's bridge [default: --gateway; "
        "harbor:<type>: the gateway's --public-url]",
        json_schema_extra=cli("--sandbox-gateway", envvar="HARNESSRL_SANDBOX_GATEWAY"),
    )


class GatewayConfig(Section):
    url: str = Field(
        DEFAULT_GATEWAY, description="The gateway's URL", json_schema_extra=cli("--gateway", envvar="HARNESSRL_GATEWAY")
    )
    admin_key: str | None = Field(  # a secret: never printed nor stored
        None,
        exclude=True,
        repr=False,
        description="The gateway's admin key [default: $HARNESSRL_HOME/admin.key]",
        json_schema_extra=cli(envvar="HARNESSRL_ADMIN_KEY"),
    )


class OwnGatewayConfig(GatewayConfig):
    url: str | None = Field(
        None,
        description="Train through this running gateway (`harnessrl serve`, on the same --database-url and model) "
        "instead of starting vLLM and a gateway: quickstarts of several policies share one engine",
        json_schema_extra=cli("--gateway"),
    )


class StoreConfig(Section):
    url: str | None = Field(
        None,
        description="sqlite:///PATH or postgresql://USER@HOST/DB [default: SQLite under $HARNESSRL_HOME]",
        json_schema_extra=cli("--database-url", envvar="HARNESSRL_DATABASE_URL"),
    )


class JudgeConfig(Section):
    """An LLM judge adding the reward component ``judge`` (harnesses/grading/judge.py); no model: no judge."""

    model: str | None = Field(
        None,
        description="An LLM judge adding the reward component `judge`: a litellm model string (hosted_vllm/NAME, "
        "openai/..., anthropic/...); provider keys come from the environment as litellm reads them",
        json_schema_extra=cli("--judge"),
    )
    rubric: LoosePath | None = Field(None, description="The judge's rubric: a text file saying what good work is")
    mode: str = Field(  # JudgeSettings checks it
        "rollout",
        description="rollout: score each rollout; group: score a group's rollouts against each other in one call "
        "(RULER-style)",
        json_schema_extra=cli("--judge-mode"),
    )
    base_url: str | None = Field(
        None,
        description="The judge's API base, e.g. http://127.0.0.1:8100/v1 for hosted_vllm/",
        json_schema_extra=cli("--judge-base-url", envvar="HARNESSRL_JUDGE_BASE_URL"),
    )
    concurrency: int = Field(4, ge=1, description="Judge calls at once", json_schema_extra=cli("--judge-concurrency"))
    timeout_s: float = Field(
        120.0, ge=1.0, description="Seconds per judge call before it abstains", json_schema_extra=cli("--judge-timeout")
    )

    def settings(self):
        """The judge asked for (None without a model); ValueError naming the missing or bad option."""
        from harnesses.grading.judge import JudgeSettings
        from harnesses.grading.rubric import load_rubric
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
    mode: Literal["rollout"] = "rollout"  # the job's rollouts are judged one at a time: a key, no option


class TeacherApiConfig(Section):
    """A teacher model served through a gateway of its own on the store (harnessrl.teachers.teacher)."""

    base_url: str | None = Field(
        None,
        description="A teacher's API base (hosted_vllm/...): --upstream's, eval's teacher:MODEL's",
        json_schema_extra=cli("--upstream-base-url"),
    )


class TeacherConfig(TeacherApiConfig):
    policy_model: LoosePath | None = Field(
        None,
        description="With a teacher (run --upstream, eval teacher:MODEL): the policy's model folder, whose tokenizer "
        "records the teacher's calls [default: SmolLM2]",
    )


class RunTeacherConfig(TeacherConfig):
    model: str | None = Field(
        None,
        description="A teacher run: serve the agents by this litellm model (openai/..., hosted_vllm/NAME; "
        "solutions: each task's reference solution as the agent's own shell tool call) instead of the policy, "
        "recorded with the policy's tokens into --database-url; SFT data, never GRPO's",
        json_schema_extra=cli("--upstream"),
    )


class WarmStartTeacherConfig(TeacherApiConfig):
    """A warm start's teacher; no model: the policy's own best of G."""

    model: str | None = Field(
        None,
        description="With --warm-start: the teacher, a litellm model string (openai/..., hosted_vllm/NAME), or "
        "solutions: each task's reference solution played as the agent's own shell tool call",
        json_schema_extra=cli("--upstream"),
    )


class SamplingConfig(Section):
    """A new run's sampling, applied to every call; None leaves it to the run (or the defaults, 1.0)."""

    temperature: float | None = Field(
        None,
        ge=0.01,
        le=2.0,
        description="Sampling temperature of a new run, applied to every call [default: 1.0; a run keeps its own]",
    )
    top_p: float | None = Field(None, ge=0.01, le=1.0, description="Nucleus sampling top_p of a new run [default: 1.0]")

    def request(self) -> dict | None:
        """As POST /api/rollouts takes it."""
        asked = {"temperature": self.temperature, "top_p": self.top_p}
        return {name: value for name, value in asked.items() if value is not None} or None


class EvalSamplingConfig(Section):
    temperature: float = Field(
        1.0, ge=0.0, le=2.0, description="The evaluation run's sampling temperature (0: greedy, then use -k 1)"
    )

    def request(self) -> dict:
        return {"temperature": self.temperature, "top_p": 1.0}


class WorkersConfig(Section):
    """This runner among the run's runners (rollouts/slot_leases.py)."""

    worker_id: str = Field(
        "",  # "": HOST-PID-RANDOM
        description="This runner's id among the run's runners (several may share a run, on several hosts) "
        "[default: HOST-PID-RANDOM]",
        json_schema_extra=cli(envvar="HARNESSRL_WORKER_ID"),
    )
    lease_s: float = Field(
        DEFAULT_LEASE_S,
        ge=1.0,
        le=3600.0,
        description="Each claimed (task, index) slot's lease, renewed every third of it: a runner that dies has "
        "its slots played by another this long after",
    )

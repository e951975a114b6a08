"""The options of `harnessrl run` and `harnessrl eval`, each declared once with the config key it sets
(``Sets``; the defaults are the config's, harnessrl/config/jobs.py). Those every command shares (store, admin
key, sandbox, task selection) are in ``harnessrl.cli.options``; the judge's in ``harnessrl.cli.judge_options``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harnesses.registry import harness_help
from harnessrl.cli.options import Sets
from harnessrl.config.files import defaults, field_bounds
from harnessrl.config.jobs import EvalConfig, RunConfig
from store.capture_modes import capture_help

RUN = defaults(RunConfig)  # what `run` shows as its defaults
EVAL = defaults(EvalConfig)
EVAL_POLICIES = ",".join(EVAL.policies)  # as --policies writes them


def comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


RunName = Annotated[str | None, typer.Option(help="The run's name; rerunning the same command resumes it"), Sets("run")]
EvalRunName = Annotated[
    str | None,
    typer.Option(help="The evaluation run's name; rerunning the same command resumes it [default: eval-<time>]"),
    Sets("run"),
]
HarnessName = Annotated[
    str,
    typer.Option(help=harness_help() + " (oneshot: the builtin agent as quickstart runs it, one reply, no tools)"),
    Sets("harness"),
]
RunPolicy = Annotated[
    str | None,
    typer.Option(
        help="The policy (named adapter lineage) the run trains and is served; a new name starts one "
        "[default: the harness's name]"
    ),
    Sets("policy"),
]
EvalPolicy = Annotated[
    str | None,
    typer.Option(help="The policy that base and latest name [default: the server's default, policy]"),
    Sets("policy"),
]
Policies = Annotated[
    str,
    typer.Option(
        help="Comma-separated pins: base, latest (the version current at the start), POLICY@latest, "
        "POLICY@vN, POLICY-vN (e.g. pi@latest,opencode@v3; a pin without a policy names --policy's) and "
        "teacher:MODEL (a litellm model string on the same tasks and harness, through a teacher gateway "
        "on --database-url)"
    ),
    Sets("policies", comma_list),
]
K = Annotated[
    int,
    typer.Option("-k", "--k", help="Rollouts per task per policy (pass@k)", **field_bounds(EvalConfig, "k")),
    Sets("k"),
]
Out = Annotated[
    Path | None,
    typer.Option(help="Folder for eval.json and eval.png [default: $HARNESSRL_HOME/eval/<run>]"),
    Sets("out"),
]
GroupSize = Annotated[
    int,
    typer.Option(help="G: rollouts per task (one GRPO group)", **field_bounds(RunConfig, "group_size")),
    Sets("group_size"),
]
Concurrency = Annotated[
    int,
    typer.Option(help="Rollouts at once (eval: all policies together)", **field_bounds(RunConfig, "concurrency")),
    Sets("concurrency"),
]
GatewayUrl = Annotated[str, typer.Option(envvar="HARNESSRL_GATEWAY", help="The gateway's URL"), Sets("gateway.url")]
Rewards = Annotated[list[str] | None, typer.Option(help="module:function, repeatable"), Sets("rewards")]
Capture = Annotated[str | None, typer.Option(help=capture_help() + ", for a new run"), Sets("capture")]
MemoryGib = Annotated[float, typer.Option(help="Memory limit per sandbox"), Sets("sandbox.memory_gib")]
WallFactor = Annotated[
    float,
    typer.Option(
        help="Wall-clock ceiling per rollout, in multiples of the task's agent budget (the "
        "budget counts the agent's own time; time in model calls is the engine's)",
        **field_bounds(RunConfig, "sandbox.wall_factor"),
    ),
    Sets("sandbox.wall_factor"),
]
RunTemperature = Annotated[
    float | None,
    typer.Option(
        help="Sampling temperature of a new run, applied to every call [default: 1.0; a run keeps its own]",
        **field_bounds(RunConfig, "sampling.temperature"),
    ),
    Sets("sampling.temperature"),
]
EvalTemperature = Annotated[
    float,
    typer.Option(
        help="The evaluation run's sampling temperature (0: greedy, then use -k 1)",
        **field_bounds(EvalConfig, "sampling.temperature"),
    ),
    Sets("sampling.temperature"),
]
TopP = Annotated[
    float | None,
    typer.Option(
        help="Nucleus sampling top_p of a new run [default: 1.0]", **field_bounds(RunConfig, "sampling.top_p")
    ),
    Sets("sampling.top_p"),
]
AllowUnisolated = Annotated[
    bool,
    typer.Option(
        help="Without bubblewrap, run local sandboxes as plain subprocesses: the agent sees this user's "
        "files and network (trusted agents only)"
    ),
    Sets("sandbox.allow_unisolated"),
]
AllowInternet = Annotated[
    bool,
    typer.Option(help="Give tasks whose task.toml says allow_internet = true the host's network (else refused)"),
    Sets("sandbox.allow_internet"),
]
Upstream = Annotated[
    str | None,
    typer.Option(
        help="A teacher: a litellm model string (openai/..., hosted_vllm/NAME), or solutions (each task's "
        "reference solution as the agent's own shell tool call), recorded with the policy's tokens. run: it "
        "serves the agents instead of the policy, into --database-url (SFT data, never GRPO's); quickstart: "
        "the --warm-start's teacher"
    ),
    Sets("teacher.model"),
]
UpstreamBaseUrl = Annotated[
    str | None,
    typer.Option(help="A teacher's API base (hosted_vllm/...): --upstream's, eval's teacher:MODEL's"),
    Sets("teacher.base_url"),
]
PolicyModel = Annotated[
    Path | None,
    typer.Option(
        help="With a teacher (run --upstream, eval teacher:MODEL): the policy's model folder, whose tokenizer "
        "records the teacher's calls [default: SmolLM2]"
    ),
    Sets("teacher.policy_model"),
]
WorkerId = Annotated[
    str,
    typer.Option(
        envvar="HARNESSRL_WORKER_ID",
        help="This runner's id among the run's runners (several may share a run, "
        "on several hosts) [default: HOST-PID-RANDOM]",
    ),
    Sets("workers.worker_id"),
]
LeaseS = Annotated[
    float,
    typer.Option(
        help="Each claimed (task, index) slot's lease, renewed every third of it: a "
        "runner that dies has its slots played by another this long after",
        **field_bounds(RunConfig, "workers.lease_s"),
    ),
    Sets("workers.lease_s"),
]
SandboxGateway = Annotated[
    str | None,
    typer.Option(
        envvar="HARNESSRL_SANDBOX_GATEWAY",
        help="The URL sandboxes reach the gateway by, through this worker's bridge [default: --gateway; "
        "harbor:<type>: the gateway's --public-url]",
    ),
    Sets("sandbox.gateway"),
]

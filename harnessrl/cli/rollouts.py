"""`harnessrl run` and `harnessrl eval`: rollouts of a harness on tasks, by the policy or a teacher."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harnesses.registry import harness_help
from harnessrl.cli.judge_options import NO_JUDGE, JudgeOptions, judge_options
from harnessrl.cli.options import (
    TASKS_HELP,
    AdminKey,
    DatabaseUrl,
    Exclude,
    Include,
    SandboxOption,
    SandboxOptions,
    Split,
    TestFraction,
    checked_policy,
    checked_sandbox,
    console,
    fail,
    harness_policy,
    judge_settings,
    resolve_admin_key,
    resolve_database_url,
    task_selection,
    upgrade_store,
)
from store.capture_modes import TEACHER_CAPTURE, capture_help
from store.policies import DEFAULT_POLICY


@judge_options()
def run_rollouts(
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)],  # a path or a spec (openenv:http://...)
    run: Annotated[str, typer.Option(help="The run's name; rerunning the same command resumes it")],
    harness: Annotated[str, typer.Option(help=harness_help())] = "builtin",
    policy: Annotated[
        str | None,
        typer.Option(
            help="The policy (named adapter lineage) the run trains and is served; a new name starts one "
            "[default: the harness's name]"
        ),
    ] = None,
    group_size: Annotated[int, typer.Option(min=1, help="G: rollouts per task (one GRPO group)")] = 4,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once")] = 4,
    sandbox: SandboxOption = "local",
    sandbox_option: SandboxOptions = None,
    gateway: Annotated[
        str, typer.Option(envvar="HARNESSRL_GATEWAY", help="The gateway's URL")
    ] = "http://127.0.0.1:8000",
    admin_key: AdminKey = None,
    reward: Annotated[list[str] | None, typer.Option(help="module:function, repeatable")] = None,
    capture: Annotated[str | None, typer.Option(help=capture_help() + ", for a new run")] = None,
    memory_gib: Annotated[float, typer.Option(help="Memory limit per sandbox")] = 2.0,
    wall_factor: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Wall-clock ceiling per rollout, in multiples of the task's agent budget (the "
            "budget counts the agent's own time; time in model calls is the engine's)",
        ),
    ] = 10.0,
    temperature: Annotated[
        float | None,
        typer.Option(
            min=0.01,
            max=2.0,
            help="Sampling temperature of a new run, applied to every call [default: 1.0; a run keeps its own]",
        ),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option(min=0.01, max=1.0, help="Nucleus sampling top_p of a new run [default: 1.0]")
    ] = None,
    allow_unisolated: Annotated[
        bool,
        typer.Option(
            help="Without bubblewrap, run local sandboxes as plain subprocesses: the agent sees this user's "
            "files and network (trusted agents only)"
        ),
    ] = False,
    judge: JudgeOptions = NO_JUDGE,
    include: Include = None,
    exclude: Exclude = None,
    split: Split = "all",
    test_fraction: TestFraction = 0.2,
    allow_internet: Annotated[
        bool,
        typer.Option(help="Give tasks whose task.toml says allow_internet = true the host's network (else refused)"),
    ] = False,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="A teacher run: serve the agents by this litellm model (openai/..., hosted_vllm/NAME; solutions: "
            "each task's reference solution as the agent's own shell tool call) instead of the "
            "policy, recorded with the policy's tokens into --database-url; SFT data, never GRPO's"
        ),
    ] = None,
    upstream_base_url: Annotated[str | None, typer.Option(help="The teacher's API base (hosted_vllm/...)")] = None,
    policy_model: Annotated[
        Path | None,
        typer.Option(
            help="With --upstream: the policy's model folder, whose tokenizer records the calls [default: SmolLM2]"
        ),
    ] = None,
    database_url: DatabaseUrl = None,
    worker_id: Annotated[
        str,
        typer.Option(
            envvar="HARNESSRL_WORKER_ID",
            help="This runner's id among the run's runners (several may share a run, "
            "on several hosts) [default: HOST-PID-RANDOM]",
        ),
    ] = "",
    lease_s: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=3600.0,
            help="Each claimed (task, index) slot's lease, renewed every third of it: a "
            "runner that dies has its slots played by another this long after",
        ),
    ] = 30.0,
    sandbox_gateway: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_SANDBOX_GATEWAY",
            help="The URL sandboxes reach the gateway by, through this worker's bridge [default: --gateway; "
            "harbor:<type>: the gateway's --public-url]",
        ),
    ] = None,
) -> None:
    """Run G rollouts of a harness on every task, verify them and record their rewards."""
    import asyncio
    from contextlib import nullcontext

    from harnesses.launch import launch_run
    from sandboxes.bridge_limits import raise_open_files_limit
    from sandboxes.kinds import option_pairs

    console.print(f"file descriptors: {raise_open_files_limit()}")  # each agent connection holds two
    key = resolve_admin_key(admin_key)
    judged = judge_settings(judge)
    selection = task_selection(include, exclude, split, test_fraction)
    served = checked_policy(policy) or harness_policy(harness)
    try:
        with (
            _teacher_gateway(
                upstream, upstream_base_url, policy_model, database_url, key, selection, tasks, harness, sandbox
            )
            if upstream
            else nullcontext(gateway) as url
        ):
            summary = asyncio.run(
                launch_run(
                    tasks,
                    run,
                    harness,
                    group_size,
                    concurrency,
                    sandbox,
                    url,
                    key,
                    reward or [],
                    TEACHER_CAPTURE if upstream else capture,
                    memory_gib,
                    wall_factor=wall_factor,
                    sampling=_sampling(temperature, top_p),
                    allow_unisolated=allow_unisolated,
                    judge=judged,
                    selection=selection,
                    allow_internet=allow_internet,
                    teacher=upstream,
                    worker=worker_id,
                    lease_s=lease_s,
                    sandbox_gateway=sandbox_gateway,
                    policy=served,
                    sandbox_options=option_pairs(sandbox_option or []),
                )
            )
    except (ValueError, RuntimeError) as exc:  # bad tasks, harness, reward spec, unreachable gateway
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: sandboxes closed, rollouts ended
        raise fail(
            f"run {run!r} interrupted: its rollouts in flight were cancelled and their sandboxes removed; "
            f"the same command resumes it"
        ) from None
    console.print(summary)


def _teacher_gateway(
    model: str,
    base_url: str | None,
    policy_model: Path | None,
    database_url: str | None,
    key: str,
    selection,
    tasks: str,
    harness: str,
    sandbox: str,
):
    """A gateway of its own on the store, served by the teacher (harnessrl.engines.teacher): a litellm model, or
    ``solutions`` (the tasks' reference solutions as the harness's tool calls); its URL."""
    from harnesses.datasets import load_selection
    from harnesses.registry import create_harness
    from harnessrl.engines.demonstrations import SOLUTIONS, demonstrator
    from harnessrl.engines.model_prep import prepare_smollm2
    from harnessrl.engines.teacher import TeacherSettings, teacher_gateway

    teacher = None
    if model == SOLUTIONS:
        teacher = demonstrator(model, load_selection(tasks, selection), create_harness(harness, sandbox))

    url = resolve_database_url(database_url)
    upgrade_store(url)
    settings = TeacherSettings(
        model=model, tokenizer_dir=(policy_model or prepare_smollm2()).resolve(), api_base=base_url
    )
    return teacher_gateway(settings, url, key, teacher)


def _sampling(temperature: float | None, top_p: float | None) -> dict | None:
    """The run's sampling as POST /api/rollouts takes it; None leaves it to the run (or the defaults)."""
    asked = {"temperature": temperature, "top_p": top_p}
    return {name: value for name, value in asked.items() if value is not None} or None


@judge_options(modes=False)
def eval_policies(
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)] = "builtin:arithmetic",
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated pins: base, latest (the version current at the start), POLICY@latest, "
            "POLICY@vN, POLICY-vN (e.g. pi@latest,opencode@v3; a pin without a policy names --policy's) and "
            "teacher:MODEL (a litellm model string on the same tasks and harness, through a teacher gateway "
            "on --database-url)"
        ),
    ] = "base,latest",
    policy: Annotated[
        str | None, typer.Option(help="The policy that base and latest name [default: the server's default, policy]")
    ] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Rollouts per task per policy (pass@k)")] = 8,
    harness: Annotated[
        str,
        typer.Option(help=harness_help() + " (oneshot: the builtin agent as quickstart runs it, one reply, no tools)"),
    ] = "builtin",
    split: Split = "test",
    test_fraction: TestFraction = 0.2,
    include: Include = None,
    exclude: Exclude = None,
    run: Annotated[
        str | None,
        typer.Option(help="The evaluation run's name; rerunning the same command resumes it [default: eval-<time>]"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for eval.json and eval.png [default: $HARNESSRL_HOME/eval/<run>]")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Rollouts at once, all policies together")] = 4,
    sandbox: SandboxOption = "local",
    sandbox_option: SandboxOptions = None,
    temperature: Annotated[
        float,
        typer.Option(min=0.0, max=2.0, help="The evaluation run's sampling temperature (0: greedy, then use -k 1)"),
    ] = 1.0,
    memory_gib: Annotated[float, typer.Option(help="Memory limit per sandbox")] = 2.0,
    wall_factor: Annotated[float, typer.Option(min=1.0, help="Wall-clock ceiling per rollout (see run)")] = 10.0,
    allow_unisolated: Annotated[bool, typer.Option(help="See run --allow-unisolated")] = False,
    gateway: Annotated[
        str, typer.Option(envvar="HARNESSRL_GATEWAY", help="The gateway's URL")
    ] = "http://127.0.0.1:8000",
    admin_key: AdminKey = None,
    judge: JudgeOptions = NO_JUDGE,
    upstream_base_url: Annotated[str | None, typer.Option(help="A teacher:MODEL's API base (hosted_vllm/...)")] = None,
    policy_model: Annotated[
        Path | None,
        typer.Option(
            help="With teacher:MODEL: the policy's model folder, whose tokenizer records its calls [default: SmolLM2]"
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Evaluate policies on tasks: k rollouts per task per policy, each pinned to its policy; a table,
    eval.json and eval.png (per policy pass@1, pass@k, mean reward with a 95% interval, failures)."""
    import time

    from harnesses.datasets import load_selection
    from harnesses.task import TaskError
    from harnessrl.evaluation.evaluate import EvalPlan, eval_harness, evaluate
    from harnessrl.settings import data_home
    from sandboxes import Limits, SandboxSpec

    options = checked_sandbox(sandbox, sandbox_option, allow_unisolated)
    asked = tuple(p.strip() for p in policies.split(",") if p.strip())
    if not asked:
        raise fail("--policies names at least one policy: base, latest, pi@latest, opencode@v3 or teacher:MODEL")
    default_policy = checked_policy(policy) or DEFAULT_POLICY
    name = run or time.strftime("eval-%Y%m%d-%H%M%S", time.gmtime())
    from harnesses.judge import Judge  # eval judges each rollout on its own (its jobs are single rollouts)

    judged = judge_settings(judge)
    try:
        chosen = load_selection(tasks, task_selection(include, exclude, split, test_fraction))
        plan = EvalPlan(
            run=name,
            tasks=chosen,
            harness=eval_harness(harness, sandbox),
            policies=asked,
            k=k,
            concurrency=concurrency,
            sandbox=sandbox,
            sampling={"temperature": temperature, "top_p": 1.0},
            base_spec=SandboxSpec(limits=Limits(memory_bytes=int(memory_gib * 2**30), cpus=1.0)),
            sandbox_options=options,
            wall_factor=wall_factor,
            judge=Judge(judged) if judged else None,
            harness_name=harness,
            policy=default_policy,
            **_eval_teacher(asked, upstream_base_url, policy_model, database_url),
        )
        document = evaluate(plan, gateway, resolve_admin_key(admin_key), out or data_home() / "eval" / name, Console())
    except (TaskError, ValueError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    console.print(f"eval.json: {document['files']['json']}\neval.png: {document['files']['png']}")
    if document.get("interrupted"):
        raise fail(f"eval {name!r} interrupted: eval.json holds the rollouts that ended; the same command resumes it")


def _eval_teacher(
    asked: tuple[str, ...], base_url: str | None, policy_model: Path | None, database_url: str | None
) -> dict:
    """EvalPlan's teacher fields when a teacher:MODEL is asked for (the store, the policy's tokenizer)."""
    if not any(name.startswith("teacher:") for name in asked):
        return {}
    from harnessrl.engines.model_prep import prepare_smollm2

    url = resolve_database_url(database_url)
    upgrade_store(url)
    return {
        "database_url": url,
        "policy_model": (policy_model or prepare_smollm2()).resolve(),
        "teacher_base_url": base_url,
    }

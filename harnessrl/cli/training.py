"""`harnessrl quickstart`, `train`, `sft` and `demo`: training a LoRA adapter (and the all-in-one runs)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from harnesses.registry import agent_names, harness_help
from harnessrl.cli.judge_options import NO_JUDGE, JudgeOptions, judge_options
from harnessrl.cli.options import (
    TASKS_HELP,
    AdminKey,
    DatabaseUrl,
    Exclude,
    Include,
    SandboxOption,
    SandboxOptions,
    TestFraction,
    check_choice,
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
from store.capture_modes import DEFAULT_CAPTURE, CaptureMode, capture_help


@judge_options()
def quickstart(
    minutes: Annotated[float, typer.Option(help="Start rollouts for this long")] = 14.0,
    until_version: Annotated[
        int,
        typer.Option(
            min=0, help="And go on past --minutes until the learner has published this version (a step count)"
        ),
    ] = 0,
    run: Annotated[str, typer.Option(help="The run's name")] = "quickstart",
    tasks: Annotated[str, typer.Option(help=TASKS_HELP)] = "builtin:arithmetic",
    model: Annotated[Path | None, typer.Option(help="Model folder (default: SmolLM2, prepared)")] = None,
    split: Annotated[str, typer.Option(help="The split trained on (all | train | test); eval uses test")] = "train",
    test_fraction: TestFraction = 0.2,
    include: Include = None,
    exclude: Exclude = None,
    eval_every: Annotated[
        int,
        typer.Option(
            min=0,
            help="Evaluate on the held-out (test) split: the base model, then every N versions and the "
            "last, into the run <run>-eval (0: off)",
        ),
    ] = 0,
    eval_k: Annotated[int, typer.Option(min=1, help="Rollouts per held-out task per evaluation")] = 4,
    unseen_tasks: Annotated[
        str | None,
        typer.Option(
            help="With --eval-every: tasks of a kind never trained on (builtin:shell-unseen), evaluated beside the "
            "held-out split into <run>-unseen-eval"
        ),
    ] = None,
    harness: Annotated[
        str,
        typer.Option(
            help="The agent: " + harness_help(agent_names()) + " (builtin: one-shot; the others: real CLI agents)"
        ),
    ] = "builtin",
    policy: Annotated[
        str | None,
        typer.Option(
            help="The policy (named adapter lineage) it trains, serves and evaluates [default: the harness's name]"
        ),
    ] = None,
    gateway: Annotated[
        str | None,
        typer.Option(
            help="Train through this running gateway (`harnessrl serve`, on the same --database-url and model) "
            "instead of starting vLLM and a gateway: quickstarts of several policies share one engine"
        ),
    ] = None,
    sandbox: SandboxOption = "local",
    sandbox_option: SandboxOptions = None,
    call_max_tokens: Annotated[int, typer.Option(min=16, help="A CLI agent's max tokens per model call")] = 256,
    train_temperature: Annotated[
        float | None,
        typer.Option(
            min=0.05,
            max=2.0,
            help="Sampling temperature of the GRPO rounds (above 1 keeps a near-certain SFT policy exploring) "
            "[default: the agent's, 1.0; evaluation always uses the agent's]",
        ),
    ] = None,
    engine_gpu_memory: Annotated[
        float | None,
        typer.Option(min=0.05, max=0.95, help="On a GPU: vLLM's share of its memory; the learner uses the rest"),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(min=256, help="The engine's context [default: 2048; a CLI agent's first prompt + 2 answers + 1k]"),
    ] = None,
    group_size: int = 4,
    concurrency: int = 8,
    capture: Annotated[
        str | None,
        typer.Option(help=f"How the policy's runs are captured: {capture_help()} [default: {DEFAULT_CAPTURE}]"),
    ] = None,
    task_sampling: Annotated[
        str,
        typer.Option(
            help="Which tasks a GRPO round plays: pass (every task once) or learnable (rounds of the learner's "
            "backlog, drawn by each task family's chance of a reward spread from its last rollouts)"
        ),
    ] = "pass",
    learner_metrics_port: Annotated[
        int | None,
        typer.Option(help="Port of the learner's Prometheus /metrics on 127.0.0.1 (default: a free one; 0: off)"),
    ] = None,
    database_url: DatabaseUrl = None,
    admin_key: AdminKey = None,
    judge: JudgeOptions = NO_JUDGE,
    warm_start: Annotated[
        bool,
        typer.Option(
            help="First a warm-up run (<run>-warmup: a teacher's with --upstream, else the policy's best of "
            "--warm-up-group-size), SFT on its successes published as the next version, then GRPO from it"
        ),
    ] = False,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="With --warm-start: the teacher, a litellm model string (openai/..., hosted_vllm/NAME), or "
            "solutions: each task's reference solution played as the agent's own shell tool call"
        ),
    ] = None,
    upstream_base_url: Annotated[str | None, typer.Option(help="The teacher's API base (hosted_vllm/...)")] = None,
    warm_up_rounds: Annotated[int, typer.Option(min=1, help="Warm-up passes over the tasks")] = 1,
    warm_up_group_size: Annotated[int, typer.Option(min=1, help="G of the policy's best-of-G warm-up")] = 8,
    sft_epochs: Annotated[int, typer.Option(min=1, help="SFT passes over the warm-up's successes")] = 4,
    sft_lr: Annotated[float, typer.Option(min=0.0, help="SFT learning rate (LoRA)")] = 5e-4,
    lr: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="GRPO's learning rate (LoRA) [default: 5e-4 from a fresh LoRA, 1e-4 after --warm-start, "
            "where 5e-4 was measured to collapse the SFT policy]",
        ),
    ] = None,
) -> None:
    """Engine, gateway, rollouts and the learner on this machine, with one live display."""
    from harnesses.agents import AgentNotInstalled
    from harnesses.datasets import load_selection
    from harnesses.task import TaskError
    from harnessrl.engines.demonstrations import SOLUTIONS
    from harnessrl.engines.process import EngineFailed, model_max_len
    from harnessrl.server import free_port
    from harnessrl.training.curriculum import TaskSampling
    from harnessrl.training.quickstart import Quickstart
    from harnessrl.training.quickstart_plan import ContextTooShort, QuickstartPlan, default_model, engine_context
    from harnessrl.training.warm_start import WarmStart

    if tasks.startswith("openenv:"):  # its rounds run the one-shot builtin agent, which has no environment tools
        raise fail(
            f"quickstart trains on task files and families; an OpenEnv environment runs with `harnessrl run "
            f"--tasks {tasks} --harness builtin|opencode --run NAME` and `harnessrl train --run NAME`"
        )
    check_choice("--capture", capture, CaptureMode)
    check_choice("--task-sampling", task_sampling, TaskSampling)
    if upstream and not warm_start:
        raise fail("--upstream names the warm start's teacher: add --warm-start")
    loopback = gateway is None or warm_start  # its own gateway, a warm start's teacher
    sandbox_options = checked_sandbox(sandbox, sandbox_option, loopback_gateway=loopback, local_later=True)
    warm = (
        WarmStart(
            teacher=upstream,
            teacher_base_url=upstream_base_url,
            rounds=warm_up_rounds,
            group_size=warm_up_group_size,
            epochs=sft_epochs,
            lr=sft_lr,
        )
        if warm_start
        else None
    )
    url = resolve_database_url(database_url)
    upgrade_store(url)
    if harness not in agent_names():
        builtin, *agents = agent_names()
        raise fail(f"unknown harness {harness!r}: choose {builtin} or one of {', '.join(agents)}")
    if upstream == SOLUTIONS and harness == "builtin":
        raise fail(
            f"--upstream {SOLUTIONS} plays solutions as a CLI agent's shell tool calls: add --harness pi (or another agent)"
        )
    try:
        chosen = load_selection(tasks, task_selection(include, exclude, split, test_fraction))
        held_out = load_selection(tasks, task_selection(include, exclude, "test", test_fraction)) if eval_every else []
        unseen = load_selection(unseen_tasks, task_selection(None, None, "all", 0.0)) if unseen_tasks else []
    except TaskError as exc:
        raise fail(str(exc)) from None
    if unseen and not eval_every:
        raise fail("--unseen-tasks are evaluated with the held-out split: add --eval-every N")
    model_dir = (model or default_model(harness, call_max_tokens, max_model_len)).resolve()
    try:
        context = engine_context(harness, call_max_tokens, model_max_len(model_dir), max_model_len)
    except (ContextTooShort, EngineFailed) as exc:
        raise fail(str(exc)) from None
    plan = QuickstartPlan(
        run=run,
        model_dir=model_dir,
        tasks=chosen,
        database_url=url,
        minutes=minutes,
        until_version=until_version,
        engine_gpu_memory=engine_gpu_memory,
        group_size=group_size,
        concurrency=concurrency,
        learner_metrics_port=free_port() if learner_metrics_port is None else learner_metrics_port,
        admin_key=resolve_admin_key(admin_key, create=True),
        eval_every=eval_every,
        eval_tasks=held_out,
        eval_k=eval_k,
        judge=judge_settings(judge),
        warm_start=warm,
        harness=harness,
        call_max_tokens=call_max_tokens,
        train_temperature=train_temperature,
        max_model_len=context,
        unseen_tasks=unseen,
        lr=lr,
        capture=capture,
        task_sampling=task_sampling,
        policy=checked_policy(policy) or harness_policy(harness),
        sandbox=sandbox,
        sandbox_options=sandbox_options,
    )
    try:
        png, adapter = Quickstart(plan, console).run(gateway)
    except AgentNotInstalled as exc:
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: engine, learner and sandboxes stopped
        raise fail(
            f"quickstart {run!r} interrupted: its engine, learner and sandboxes are stopped; what it recorded "
            f"stays in the store (harnessrl ls)"
        ) from None
    console.print(f"reward curve: {png}")
    console.print(f"final adapter: {adapter or 'none published (the learner took no step)'}")


def train(
    run: Annotated[str, typer.Option(help="The run whose ready groups to train on")],
    config: Annotated[
        Path | None,
        typer.Option(help="Learner settings (TOML); every key is optional, see --show-config for the defaults"),
    ] = None,
    database_url: DatabaseUrl = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many steps in total (0: never)")] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus /metrics on 127.0.0.1:PORT (0: off; overrides the config's metrics_port)"),
    ] = None,
    show_config: Annotated[bool, typer.Option(help="Print the resolved settings as TOML and exit")] = False,
    admin_key: Annotated[
        str | None,
        typer.Option(
            envvar="HARNESSRL_ADMIN_KEY",
            help="The gateway's admin key, for publishing "
            "[default: the config's admin_key, else $HARNESSRL_HOME/admin.key]",
        ),
    ] = None,
) -> None:
    """Train a LoRA adapter on the run's ready groups, continuously, publishing each new version."""
    import asyncio
    import logging

    from harnessrl.training.learner_settings import eval_thread, learner_settings
    from learner.config import ConfigError
    from learner.config_file import dump_toml, load_config
    from learner.loop import LearnerError, train_from_url
    from learner.publish import GatewayUnreachable, PublishError
    from store.training import ConsumeConflict

    try:
        settings = learner_settings(load_config(config, max_steps=max_steps, metrics_port=metrics_port), run, admin_key)
    except ConfigError as exc:
        raise fail(f"{exc}") from None
    if show_config:
        print(dump_toml(settings), end="")
        return
    url = resolve_database_url(database_url)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("learner").setLevel(logging.INFO)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the per-step log lines are the learner's display
    from learner.ranks import follow, is_leader, process_group

    try:
        with process_group():  # under torchrun: rank 0 leads the loop, the other ranks follow it
            if not is_leader():
                follow(settings)
                return
            upgrade_store(url)
            evaluator = eval_thread(settings, run, url)
            try:
                result = asyncio.run(train_from_url(settings, url, run))
            finally:
                if evaluator is not None:
                    evaluator.stop()
    except (PublishError, GatewayUnreachable, ConsumeConflict, LearnerError, ConfigError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    console.print(
        f"learner stopped ({result.reason}) at step {result.step}, policy version {result.version}; "
        f"checkpoints in {settings.checkpoint.dir}"
    )


def demo(
    max_model_len: int = 4096,
    database_url: DatabaseUrl = None,
) -> None:
    """Prepare SmolLM2, serve it on vLLM behind the gateway, run a tool-using chat, show its tokens."""
    from harnessrl.engines.demo import run_demo

    raise typer.Exit(code=run_demo(resolve_database_url(database_url), max_model_len))


def sft(
    run: Annotated[str, typer.Option(help="The run whose successful trajectories to imitate")],
    min_reward: Annotated[float, typer.Option(help="Rollouts with at least this reward count as successes")] = 1.0,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the trajectories")] = 2,
    best_of_group: Annotated[
        bool, typer.Option(help="Only the best rollout of each group (rejection sampling over a policy run)")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Learner TOML (model_dir, dtype, device, lora.rank, optimizer.lr; see `harnessrl train --show-config`)"
        ),
    ] = None,
    model: Annotated[Path | None, typer.Option(help="Model folder (default: the config's model_dir)")] = None,
    lr: Annotated[float | None, typer.Option(help="AdamW learning rate [default: the config's]")] = None,
    token_budget: Annotated[int, typer.Option(min=16, help="Tokens per packed row (longer samples left out)")] = 4096,
    samples_per_step: Annotated[
        int, typer.Option(min=1, help="Trajectories per optimizer step (packed into rows of --token-budget)")
    ] = 8,
    out: Annotated[Path | None, typer.Option(help="Output folder [default: $HARNESSRL_HOME/sft/RUN]")] = None,
    publish: Annotated[
        str | None, typer.Option(help="A gateway URL: publish the adapter there as the next policy version")
    ] = None,
    admin_key: AdminKey = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Warm start: train a LoRA adapter on the sampled tokens of a run's successful trajectories."""
    from harnessrl.settings import data_home
    from harnessrl.training.sft import SftPlan, run_sft
    from learner.config import ConfigError
    from learner.config_file import load_config
    from learner.sft import SftConfig

    try:
        settings = load_config(config, model_dir=str(model) if model else None, lr=lr)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if not settings.model_dir:
        raise fail("no model: give --model DIR (the folder the engine serves) or model_dir in --config")
    plan = SftPlan(
        run=run,
        database_url=resolve_database_url(database_url),
        learner=settings,
        out_dir=(out or data_home() / "sft" / run).resolve(),
        sft=SftConfig(epochs=epochs, samples_per_step=samples_per_step, token_budget=token_budget),
        min_reward=min_reward,
        best_of_group=best_of_group,
        gateway_url=publish,
        admin_key=resolve_admin_key(admin_key) if publish else None,
    )
    try:
        outcome = run_sft(
            plan,
            lambda s: console.print(f"step {s.step} (epoch {s.epoch + 1}): loss {s.loss:.4f} over {s.tokens} tokens"),
        )
    except (ValueError, RuntimeError) as exc:  # no successes, unreachable gateway, refused adapter
        raise fail(str(exc)) from None
    result = outcome.result
    console.print(
        f"trained on {result.samples} samples of {outcome.rollouts} rollouts ({result.refused} left out) "
        f"in {outcome.seconds:.0f} s; adapter: {outcome.adapter}"
    )
    if outcome.version is not None:
        console.print(f"published as policy-v{outcome.version}: new rollouts use it")

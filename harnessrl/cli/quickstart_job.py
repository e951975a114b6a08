"""What `harnessrl quickstart` does with its config: check it before any engine starts (errors naming the
fix), turn it into a ``QuickstartPlan`` (tasks loaded, model and engine context chosen, the admin key and
store ready), keep it beside the run's files, then play it (harnessrl/training/quickstart.py)."""

from __future__ import annotations

from harnessrl.cli.jobs import keep_config, run_config_path
from harnessrl.cli.options import (
    check_choice,
    checked_sandbox,
    console,
    fail,
    harness_policy,
    judge_settings,
    resolve_admin_key,
    resolve_database_url,
    upgrade_store,
)
from harnessrl.config.jobs import QuickstartConfig

QUICKSTART_CONFIG = "quickstart.toml"  # beside a run's files: $HARNESSRL_HOME/runs/<run>/


def start_quickstart(config: QuickstartConfig) -> None:
    """Check ``config``, keep it, and run the quickstart to its reward curve and final adapter."""
    import asyncio

    from harnesses.agents import AgentNotInstalled
    from harnessrl.training.quickstart import Quickstart

    plan = quickstart_plan(config)
    kept = config.model_copy(update={"policy": plan.policy})  # as run keeps its config: the policy resolved
    keep_config(kept, run_config_path(config.run).with_name(QUICKSTART_CONFIG))
    try:
        png, adapter = Quickstart(plan, console).run(config.gateway.url)
    except AgentNotInstalled as exc:
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: engine, learner and sandboxes stopped
        raise fail(
            f"quickstart {config.run!r} interrupted: its engine, learner and sandboxes are stopped; what it "
            f"recorded stays in the store (harnessrl ls)"
        ) from None
    console.print(f"reward curve: {png}")
    console.print(f"final adapter: {adapter or 'none published (the learner took no step)'}")


def quickstart_plan(config: QuickstartConfig):
    """The plan ``config`` asks for, or a CLI error naming the fix; nothing is started but the store's migration."""
    from harnessrl.server import free_port
    from harnessrl.training.quickstart_plan import QuickstartPlan

    _check_choices(config)
    loopback = config.gateway.url is None or config.warm_start.enabled  # its own gateway, a warm start's teacher
    sandbox = config.sandbox
    sandbox_options = checked_sandbox(sandbox.kind, sandbox.options, loopback_gateway=loopback, local_later=True)
    url = resolve_database_url(config.store.url)
    upgrade_store(url)
    _check_harness(config)
    chosen, held_out, unseen = _tasks(config)
    model_dir, context = _model(config)
    metrics_port = config.learner.metrics_port
    return QuickstartPlan(
        run=config.run,
        model_dir=model_dir,
        tasks=chosen,
        database_url=url,
        minutes=config.minutes,
        until_version=config.until_version,
        engine_gpu_memory=config.engine.gpu_memory,
        group_size=config.group_size,
        concurrency=config.concurrency,
        learner_metrics_port=free_port() if metrics_port is None else metrics_port,
        learner_folder=config.learner.folder,
        admin_key=resolve_admin_key(config.gateway.admin_key, create=True),
        eval_every=config.evaluation.every,
        eval_tasks=held_out,
        eval_k=config.evaluation.k,
        judge=judge_settings(config.judge),
        warm_start=_warm_start(config),
        harness=config.harness,
        call_max_tokens=config.call_max_tokens,
        train_temperature=config.train_temperature,
        max_model_len=context,
        unseen_tasks=unseen,
        lr=config.learner.lr,
        learner_overrides={"loss": {"echo_weight": config.learner.echo_weight}} if config.learner.echo_weight else {},
        capture=config.capture,
        task_sampling=config.task_sampling,
        policy=config.policy or harness_policy(config.harness),  # a PolicyName: checked when the config was read
        sandbox=sandbox.kind,
        sandbox_options=sandbox_options,
    )


def _check_choices(config: QuickstartConfig) -> None:
    from harnessrl.training.curriculum import TaskSampling

    source = config.tasks.source
    if source.startswith("openenv:"):  # its rounds run the one-shot builtin agent, which has no environment tools
        raise fail(
            f"quickstart trains on task files and families; an OpenEnv environment runs with `harnessrl run "
            f"--tasks {source} --harness builtin|opencode --run NAME` and `harnessrl train --run NAME`"
        )
    check_choice("--task-sampling", config.task_sampling, TaskSampling)
    if config.learner.folder is not None and config.gateway.url is None:
        raise fail("--learner-folder hands the run to a server's learner: add --gateway URL (`harnessrl serve`'s)")
    if config.teacher.model and not config.warm_start.enabled:
        raise fail("--upstream names the warm start's teacher: add --warm-start")


def _check_harness(config: QuickstartConfig) -> None:
    from harnesses.registry import agent_names
    from harnessrl.teachers.demonstrations import SOLUTIONS

    if config.harness not in agent_names():
        builtin, *agents = agent_names()
        raise fail(f"unknown harness {config.harness!r}: choose {builtin} or one of {', '.join(agents)}")
    if config.teacher.model == SOLUTIONS and config.harness == "builtin":
        raise fail(
            f"--upstream {SOLUTIONS} plays solutions as a CLI agent's shell tool calls: add --harness pi "
            f"(or another agent)"
        )


def _tasks(config: QuickstartConfig) -> tuple[list, list, list]:
    """The train tasks, the held-out ones (with evaluations) and the unseen kind's (with --unseen-tasks)."""
    from harnesses.datasets import Selection, load_selection
    from harnesses.task import TaskError

    tasks, evaluation = config.tasks, config.evaluation
    try:
        chosen = load_selection(tasks.source, tasks.selection())
        test = tasks.model_copy(update={"split": "test"})
        held_out = load_selection(tasks.source, test.selection()) if evaluation.every else []
        unseen_tasks = evaluation.unseen_tasks
        unseen = load_selection(unseen_tasks, Selection((), (), "all", 0.0)) if unseen_tasks else []
    except TaskError as exc:
        raise fail(str(exc)) from None
    if unseen and not evaluation.every:
        raise fail("--unseen-tasks are evaluated with the held-out split: add --eval-every N")
    return chosen, held_out, unseen


def _model(config: QuickstartConfig):
    """The model folder and the engine's context for the agent; a CLI error when they cannot hold its prompt."""
    from harnessrl.engine.process import EngineFailed, model_max_len
    from harnessrl.training.quickstart_plan import ContextTooShort, default_model, engine_context

    engine, harness, tokens = config.engine, config.harness, config.call_max_tokens
    model_dir = (engine.model or default_model(harness, tokens, engine.max_model_len)).resolve()
    try:
        return model_dir, engine_context(harness, tokens, model_max_len(model_dir), engine.max_model_len)
    except (ContextTooShort, EngineFailed) as exc:
        raise fail(str(exc)) from None


def _warm_start(config: QuickstartConfig):
    from harnessrl.training.warm_start import WarmStart

    warm = config.warm_start
    if not warm.enabled:
        return None
    return WarmStart(
        teacher=config.teacher.model,
        teacher_base_url=config.teacher.base_url,
        rounds=warm.rounds,
        group_size=warm.group_size,
        epochs=warm.sft_epochs,
        lr=warm.sft_lr,
    )

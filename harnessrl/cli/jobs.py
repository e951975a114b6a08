"""What `harnessrl run` and `harnessrl eval` do with their config: check it as the CLI does (errors naming
the fix), resolve what it leaves to the moment (the policy, an eval's name and folder), keep it with the run,
then play it (rollouts/launch.py, harnessrl/evaluation/)."""

from __future__ import annotations

import re
from pathlib import Path

from harnessrl.cli.options import (
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
from harnessrl.config.files import Section
from harnessrl.config.jobs import EvalConfig, RunConfig

RUN_CONFIG = "run.toml"  # beside a run's files: $HARNESSRL_HOME/runs/<run>/
EVAL_CONFIG = "eval.toml"  # beside eval.json


def run_config_path(run: str) -> Path:
    """Where `harnessrl run` keeps a run's config (the store has no place for it)."""
    from harnessrl.settings import data_home

    return data_home() / "runs" / re.sub(r"[^\w.-]", "_", run) / RUN_CONFIG


def start_run(config: RunConfig) -> None:
    """Run (or resume, or join) the run; its config is kept in ``run_config_path`` once its checks pass."""
    import asyncio
    from contextlib import nullcontext
    from functools import partial

    from rollouts.launch import launch_run
    from sandboxes.bridge_limits import raise_open_files_limit

    console.print(f"file descriptors: {raise_open_files_limit()}")  # each agent connection holds two
    key = resolve_admin_key(config.gateway.admin_key)
    judge_settings(config.judge)
    selection = task_selection(config.tasks)
    config = config.model_copy(update={"policy": config.policy or harness_policy(config.harness)})
    try:
        with (
            _teacher_gateway(config, key, selection) if config.teacher.model else nullcontext(config.gateway.url) as url
        ):
            kept = partial(keep_config, config, run_config_path(config.run))
            summary = asyncio.run(launch_run(config, url, key, on_ready=kept))
    except (ValueError, RuntimeError) as exc:  # bad tasks, harness, reward spec, unreachable gateway
        raise fail(str(exc)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C or SIGTERM: sandboxes closed, rollouts ended
        raise fail(
            f"run {config.run!r} interrupted: its rollouts in flight were cancelled and their sandboxes removed; "
            f"the same command resumes it"
        ) from None
    console.print(summary)


def _teacher_gateway(config: RunConfig, key: str, selection):
    """A gateway of its own on the store, served by the teacher (harnessrl.teachers.teacher): a litellm model, or
    ``solutions`` (the tasks' reference solutions as the harness's tool calls); its URL."""
    from harnesses.datasets import load_selection
    from harnesses.registry import create_harness
    from harnessrl.engine.model_prep import prepare_smollm2
    from harnessrl.teachers.demonstrations import SOLUTIONS, demonstrator
    from harnessrl.teachers.teacher import TeacherSettings, teacher_gateway

    model, teacher = config.teacher.model, None
    if model == SOLUTIONS:
        harness = create_harness(config.harness, config.sandbox.kind)
        teacher = demonstrator(model, load_selection(config.tasks.source, selection), harness)
    url = resolve_database_url(config.store.url)
    upgrade_store(url)
    tokenizer = (config.teacher.policy_model or prepare_smollm2()).resolve()
    settings = TeacherSettings(model=model, tokenizer_dir=tokenizer, api_base=config.teacher.base_url)
    return teacher_gateway(settings, url, key, teacher)


def start_eval(config: EvalConfig) -> None:
    """Evaluate the policies asked for; the config (its name and folder resolved) is kept beside eval.json."""
    from rich.console import Console

    from harnesses.task import TaskError
    from harnessrl.evaluation.configured import eval_plan
    from harnessrl.evaluation.evaluate import evaluate

    options = checked_sandbox(config.sandbox.kind, config.sandbox.options, config.sandbox.allow_unisolated)
    if not config.policies:
        raise fail("--policies names at least one policy: base, latest, pi@latest, opencode@v3 or teacher:MODEL")
    config = _resolved_eval(config)
    judged = judge_settings(config.judge)
    try:
        plan = eval_plan(config, options, judged, _eval_teacher(config))
        keep_config(config, config.out / EVAL_CONFIG)
        document = evaluate(
            plan, config.gateway.url, resolve_admin_key(config.gateway.admin_key), config.out, Console()
        )
    except (TaskError, ValueError, RuntimeError) as exc:
        raise fail(str(exc)) from None
    console.print(f"eval.json: {document['files']['json']}\neval.png: {document['files']['png']}")
    if document.get("interrupted"):
        raise fail(
            f"eval {config.run!r} interrupted: eval.json holds the rollouts that ended; the same command resumes it"
        )


def _resolved_eval(config: EvalConfig) -> EvalConfig:
    """What the config leaves to the start: the policy base and latest name, the run's name, its folder."""
    import time

    from harnessrl.settings import data_home
    from store.policies import DEFAULT_POLICY

    policy = config.policy or DEFAULT_POLICY  # a PolicyName: checked when the config was read
    name = config.run or time.strftime("eval-%Y%m%d-%H%M%S", time.gmtime())
    return config.model_copy(update={"policy": policy, "run": name, "out": config.out or data_home() / "eval" / name})


def _eval_teacher(config: EvalConfig) -> dict:
    """EvalPlan's teacher fields when a teacher:MODEL is asked for (the store, the policy's tokenizer)."""
    if not any(name.startswith("teacher:") for name in config.policies):
        return {}
    from harnessrl.engine.model_prep import prepare_smollm2

    url = resolve_database_url(config.store.url)
    upgrade_store(url)
    return {
        "database_url": url,
        "policy_model": (config.teacher.policy_model or prepare_smollm2()).resolve(),
        "teacher_base_url": config.teacher.base_url,
    }


def keep_config(config: Section, path: Path) -> None:
    """The job's config, as --show-config prints it (no secret), at ``path``: what a rerun can start from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.to_toml())

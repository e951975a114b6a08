"""`harnessrl quickstart`, `train`, `sft` and `demo`: training a LoRA adapter (and the all-in-one runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from harnessrl.cli.job_config import config_command
from harnessrl.cli.options import AdminKey, DatabaseUrl, console, fail, resolve_admin_key, resolve_database_url
from harnessrl.config.jobs import QuickstartConfig
from harnessrl.config.train import TrainConfig


@config_command(QuickstartConfig)
def quickstart(config: QuickstartConfig) -> None:
    """Engine, gateway, rollouts and the learner on this machine, with one terminal display."""
    from harnessrl.cli.quickstart_job import start_quickstart

    start_quickstart(config)


@config_command(TrainConfig, prefixed=True)
def train(config: TrainConfig) -> None:
    """Train a LoRA adapter on the run's ready groups, continuously, publishing each new version; with
    several runs or policies, one learner trains an adapter per policy over one copy of the base model."""
    from harnessrl.cli.train_job import start_train, train_settings
    from harnessrl.cli.train_policies import start_folder, start_policies

    runs = list(dict.fromkeys(config.runs))
    if config.settings_dir is not None:  # the runs of jobs handing them over, each on its job's settings
        admin_key = config.publish.admin_key or None
        return start_folder(runs, config.settings_dir, admin_key, config.store.url, config.metrics_port)
    if not runs and not config.policies:
        raise fail("name what to train: --run RUN (repeatable) or --policy NAME (repeatable)")
    if len(runs) == 1 and not config.policies:  # one run: its own learner, as always
        return start_train(train_settings(config.learner(), runs[0]), runs[0], config.store.url)
    return start_policies(config)


def demo(
    max_model_len: int = 4096,
    database_url: DatabaseUrl = None,
) -> None:
    """Prepare SmolLM2, serve it on vLLM behind the gateway, run a tool-using chat, show its tokens."""
    from harnessrl.engine.demo import run_demo

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
    lr: Annotated[float | None, typer.Option(help="AdamW learning rate \\[default: the config's]")] = None,
    token_budget: Annotated[int, typer.Option(min=16, help="Tokens per packed row (longer samples left out)")] = 4096,
    samples_per_step: Annotated[
        int, typer.Option(min=1, help="Trajectories per optimizer step (packed into rows of --token-budget)")
    ] = 8,
    out: Annotated[Path | None, typer.Option(help="Output folder \\[default: $HARNESSRL_HOME/sft/RUN]")] = None,
    publish: Annotated[
        str | None, typer.Option(help="A gateway URL: publish the adapter there as the next policy version")
    ] = None,
    admin_key: AdminKey = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Warm start: train a LoRA adapter on the sampled tokens of a run's successful trajectories."""
    from harnessrl.config.files import ConfigError, load_config
    from harnessrl.settings import data_home
    from harnessrl.training.sft import SftPlan, run_sft
    from learner.sft import SftConfig

    given = {"model_dir": str(model) if model else None, "optimizer.lr": lr}
    try:  # the learner's settings, read as `train --config` reads them
        loaded = load_config(TrainConfig, config, {key: value for key, value in given.items() if value is not None})
        settings = loaded.learner()
    except ConfigError as exc:
        raise fail(escape(str(exc))) from None
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

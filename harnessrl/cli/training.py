"""`harnessrl quickstart`, `train`, `sft` and `demo`: training a LoRA adapter (and the all-in-one runs)."""

from __future__ import annotations

import typer

from harnessrl.cli.job_config import config_command
from harnessrl.cli.options import DatabaseUrl, fail, resolve_database_url
from harnessrl.config.jobs import QuickstartConfig
from harnessrl.config.sft import SftJobConfig
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


@config_command(SftJobConfig)
def sft(config: SftJobConfig) -> None:
    """Warm start: train a LoRA adapter on the sampled tokens of a run's successful trajectories."""
    from harnessrl.cli.sft_job import start_sft

    start_sft(config)

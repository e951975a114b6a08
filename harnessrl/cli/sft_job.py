"""What `harnessrl sft` does with its config: the learner's settings read as `train --config` reads them (the
model and learning rate over them), then SFT on the run's successes, published where asked, its errors as CLI
messages naming the fix."""

from __future__ import annotations

from rich.markup import escape

from harnessrl.cli.options import console, fail, resolve_admin_key, resolve_database_url
from harnessrl.config.sft import SftJobConfig


def start_sft(config: SftJobConfig) -> None:
    """Train the adapter on the run's successful trajectories, publish it when asked, and say what it did."""
    from harnessrl.training.sft import run_sft

    try:
        outcome = run_sft(
            _plan(config),
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


def _plan(config: SftJobConfig):
    """The SFT plan: the learner's settings, the store, the output folder and the gateway to publish to."""
    from harnessrl.settings import data_home
    from harnessrl.training.sft import SftPlan
    from learner.sft import SftConfig

    passes, publish = config.passes, config.gateway
    return SftPlan(
        run=config.run,
        database_url=resolve_database_url(config.store.url),
        learner=learner_settings(config),
        out_dir=(config.out or data_home() / "sft" / config.run).resolve(),
        sft=SftConfig(epochs=passes.epochs, samples_per_step=passes.samples_per_step, token_budget=passes.token_budget),
        min_reward=config.min_reward,
        best_of_group=config.best_of_group,
        gateway_url=publish.url,
        admin_key=resolve_admin_key(publish.admin_key) if publish.url else None,
    )


def learner_settings(config: SftJobConfig):
    """The learner's settings (learner.config.LearnerConfig) from the learner TOML, the model and lr over it."""
    from harnessrl.config.files import ConfigError, load_config
    from harnessrl.config.train import TrainConfig

    learner = config.learner
    given = {"model_dir": str(learner.model) if learner.model else None, "optimizer.lr": learner.lr}
    try:  # read as `train --config` reads it
        loaded = load_config(
            TrainConfig, learner.file, {key: value for key, value in given.items() if value is not None}
        )
    except ConfigError as exc:
        raise fail(escape(str(exc))) from None
    settings = loaded.learner()
    if not settings.model_dir:
        raise fail("no model: give --model DIR (the folder the engine serves) or model_dir in --learner-config")
    return settings

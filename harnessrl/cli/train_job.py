"""What `harnessrl train` does with one run alone (beside others: harnessrl/cli/train_policies.py): its learner
settings resolved (harnessrl/training/learner_settings.py), then the learner's loop on the run's ready groups,
under torchrun on every rank (rank 0 leads, the others follow), with its errors as CLI messages naming the fix."""

from __future__ import annotations

from harnessrl.cli.options import console, fail, resolve_database_url, upgrade_store


def train_settings(settings, run: str):
    """``run``'s learner settings (learner.config.LearnerConfig) resolved: model folder, admin key, folders."""
    from harnessrl.training.learner_settings import learner_settings
    from learner.config import ConfigError

    try:
        return learner_settings(settings, run)
    except ConfigError as exc:
        raise fail(f"{exc}") from None


def start_train(settings, run: str, database_url: str | None) -> None:
    """Train on ``run``'s ready groups until the settings' stop, publishing each version."""
    from learner.config import ConfigError
    from learner.loop import LearnerError
    from learner.publish import GatewayUnreachable, PublishError
    from store.training import ConsumeConflict

    url = resolve_database_url(database_url)
    quiet_logs()
    try:
        result = _led(settings, run, url)
    except (PublishError, GatewayUnreachable, ConsumeConflict, LearnerError, ConfigError, FileNotFoundError) as exc:
        raise fail(str(exc)) from None
    if result is not None:
        console.print(
            f"learner stopped ({result.reason}) at step {result.step}, policy version {result.version}; "
            f"checkpoints in {settings.checkpoint.dir}"
        )


def _led(settings, run: str, url: str):
    """The loop's result on rank 0 (with the held-out evaluations beside it); None on a following rank."""
    import asyncio

    from harnessrl.training.learner_settings import eval_thread
    from learner.loop import train_from_url
    from learner.ranks import follow, is_leader, process_group

    with process_group():  # under torchrun: rank 0 leads the loop, the other ranks follow it
        if not is_leader():
            follow(settings)
            return None
        upgrade_store(url)
        evaluator = eval_thread(settings, run, url)
        try:
            return asyncio.run(train_from_url(settings, url, run))
        finally:
            if evaluator is not None:
                evaluator.stop()


def quiet_logs() -> None:
    """The learner's INFO lines, and no progress bars: the per-step log lines are its display."""
    import logging

    from transformers.utils import logging as hf_logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("learner").setLevel(logging.INFO)
    hf_logging.disable_progress_bar()

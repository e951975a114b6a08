"""What `harnessrl train` resolves around the learner's config: the model folder, the admin key it
publishes with, its output folders, and the held-out evaluation beside it (`eval_every`)."""

from __future__ import annotations

from pathlib import Path

from learner.config import ConfigError, LearnerConfig, resolve_paths


def learner_settings(settings: LearnerConfig, run: str, admin_key: str | None = None) -> LearnerConfig:
    """Fill what the config left to the environment: model folder, admin key (``admin_key`` when given, else
    the config's, else $HARNESSRL_HOME/admin.key), output folders."""
    from harnessrl.engine.model_prep import SMOLLM2_DIRNAME, default_cache_root
    from harnessrl.settings import data_home

    if not settings.model_dir:
        prepared = default_cache_root() / SMOLLM2_DIRNAME
        if not (prepared / "config.json").exists():
            raise ConfigError(
                "no model_dir in the config and no prepared SmolLM2: set model_dir to the folder "
                "the engine serves, or run `harnessrl models prepare`"
            )
        settings = settings.model_copy(update={"model_dir": str(prepared)})
    if not (Path(settings.model_dir) / "config.json").exists():
        raise ConfigError(
            f"model_dir {settings.model_dir} is not a Hugging Face model folder (no config.json); "
            f"point it at the folder `harnessrl serve --model` was given"
        )
    key = publishing_key(admin_key or settings.publish.admin_key, settings.publish.enabled)
    settings = settings.updated(publish={"admin_key": key})
    return resolve_paths(settings, data_home() / "learner" / run)


def publishing_key(given: str | None, publishing: bool) -> str:
    """The key the learner publishes with; a learner that does not publish needs none."""
    from harnessrl.settings import AdminKeyError, admin_key

    try:
        return admin_key(given)
    except AdminKeyError as exc:
        if publishing:
            raise ConfigError(
                f"{exc}; or set [publish] admin_key in the learner config (enabled = false needs none)"
            ) from None
        return ""


def eval_thread(settings: LearnerConfig, run: str, database_url: str):
    """With eval_every: held-out evaluations beside the learner, in their own thread, started (None
    without); ConfigError naming eval_every when its tasks or harness cannot be used."""
    held_out = settings.eval
    if not held_out.every:
        return None
    from harnesses.datasets import Selection, load_selection
    from harnesses.task import TaskError
    from harnessrl.evaluation.evaluate import eval_harness
    from harnessrl.evaluation.periodic import EvalEvery, EvalThread, PeriodicEval
    from sandboxes.kinds import backend_options, sandbox_kind

    try:
        kind = sandbox_kind(held_out.sandbox)  # read once: the learner's settings name it
        tasks = load_selection(held_out.tasks, Selection(split="test", test_fraction=held_out.test_fraction))
        every = EvalEvery(
            every=held_out.every,
            tasks=tasks,
            harness=eval_harness(held_out.harness, kind),
            k=held_out.k,
            concurrency=held_out.concurrency,
            sandbox=kind,
            sandbox_options=backend_options(kind, allow_unisolated=False),
            temperature=settings.temperature,
            policy=None,  # the run's, read when its first rollout made it
        )
    except (TaskError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"eval.every: {exc}") from None
    periodic = PeriodicEval(every, run, settings.publish.gateway_url, settings.publish.admin_key or None, store=None)
    return EvalThread(periodic, database_url).start()

"""`harnessrl train` with several runs or policies: one learner process for all of them (the base model
once, one adapter per policy; learner.policies_loop). Each run gets the settings a lone learner of it
would get, in folders of its own; names the store does not know are refused before anything is written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harnessrl.cli.options import console, fail, resolve_database_url, upgrade_store

SHARED_FOLDERS = (("tensorboard_dir",), ("checkpoint", "dir"), ("publish", "adapters_dir"))


def run_settings(loaded, run: str, several: bool, admin_key: str | None):
    """``run``'s resolved settings; beside others, output_dir (when the config sets one) gets a folder per run."""
    from harnessrl.training.learner_settings import learner_settings
    from learner.config import ConfigError

    if several:
        for path in SHARED_FOLDERS:
            value = loaded
            for name in path:
                value = getattr(value, name)
            if value:
                raise ConfigError(
                    f"{'.'.join(path)} is set, but several policies cannot share one folder: "
                    f"leave it empty (each run gets <output_dir>/<run>/...)"
                )
        if loaded.output_dir:
            loaded = replace(loaded, output_dir=str(Path(loaded.output_dir) / run))
    return learner_settings(loaded, run, admin_key)


def start_policies(
    runs: list[str], policies: list[str], file: Path | None, overrides: dict, database_url: str | None
) -> None:
    """Train every named run and every run of each named policy over one base model until each stops."""
    import asyncio

    from harnessrl.cli.train_job import quiet_logs
    from learner.config import ConfigError
    from learner.config_file import load_config
    from learner.loop import LearnerError

    try:
        loaded = load_config(file, max_steps=overrides["max_steps"], metrics_port=overrides["metrics_port"])
    except ConfigError as exc:
        raise fail(str(exc)) from None
    if loaded.metrics_port:
        console.print("metrics_port is ignored beside other policies (no per-policy labels yet): see the store's steps")
    url = resolve_database_url(database_url)
    upgrade_store(url)
    try:
        asyncio.run(_check_names(url, runs, policies))
    except LookupError as exc:
        raise fail(str(exc)) from None
    quiet_logs()
    try:
        results = asyncio.run(_train(url, runs, policies, loaded, overrides["admin_key"]))
    except (LearnerError, ConfigError) as exc:
        raise fail(str(exc)) from None
    for result in results.values():
        said = f": {result.error}" if result.error else ""
        console.print(
            f"{result.run} ({result.policy or '?'}): stopped ({result.reason}) at step {result.step}, "
            f"version {result.version}{said}"
        )
    if any(result.error for result in results.values()):
        raise fail("some policies stopped on an error (above); the others trained on")


async def _check_names(url: str, runs: list[str], policies: list[str]) -> None:
    """LookupError naming the known ones for a run or policy the store does not know (nothing written)."""
    from store.store import Store

    store = Store.from_url(url)
    try:
        known_runs = sorted(r.name for r in await store.listings.runs(None, 0, 100_000))
        for run in runs:
            if run not in known_runs:
                raise LookupError(
                    f"no run {run!r} in this store; known runs: {', '.join(known_runs) or 'none'} "
                    f"(beside other policies a run must exist: start it first, or train it alone, "
                    f"which waits for its first rollout)"
                )
        for policy in policies:
            await store.policies.check_known(policy)
    finally:
        await store.close()


async def _train(url: str, runs: list[str], policies: list[str], loaded, admin_key: str | None):
    from harnessrl.training.learner_settings import eval_thread
    from learner.policies_loop import run_policies
    from store.store import Store

    store = Store.from_url(url)
    settings: dict = {}
    evaluators = []

    def config(run: str):
        if run not in settings:
            settings[run] = run_settings(loaded, run, True, admin_key)
            evaluators.append(eval_thread(settings[run], run, url))
        return settings[run]

    async def source() -> list[str]:
        """The named runs, and each named policy's runs as they are now (a new one joins)."""
        bound = [s.runs for s in await store.policies.summaries() if s.name in policies]
        return list(dict.fromkeys([*runs, *(run for names in bound for run in names)]))

    first = config(runs[0]) if runs else loaded
    try:
        return await run_policies(config, store, source, poll_interval_s=first.poll_interval_s)
    finally:
        for evaluator in evaluators:
            if evaluator is not None:
                evaluator.stop()
        await store.close()

"""`harnessrl train` with several runs or policies: one learner process for all of them (the base model
once, one adapter per policy; learner.policies_loop). Each run gets the settings a lone learner of it
would get, in folders of its own; names the store does not know are refused before anything is written.
``metrics_port`` (``--metrics-port``) serves one Prometheus endpoint for the process, each policy's series
under its ``policy`` label (learner.prometheus)."""

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
            loaded = loaded.model_copy(update={"output_dir": str(Path(loaded.output_dir) / run)})
    return learner_settings(loaded, run, admin_key)


def start_policies(config) -> None:
    """Train every run ``config`` (harnessrl.config.train.TrainConfig) names and every run of each policy it names
    over one base model until each stops; a policy's runs on its settings (its table over the shared ones).
    Under torchrun rank 0 trains and the other ranks follow it (learner.policy_followers)."""
    import asyncio

    from harnessrl.cli.train_job import quiet_logs
    from learner.config import ConfigError
    from learner.loop import LearnerError
    from learner.policies_loop import Hooks

    runs, policies, admin_key = list(dict.fromkeys(config.runs)), config.policy_names(), config.publish.admin_key
    policy_of: dict[str, str] = {}  # a run's policy, as the store says when it joins

    def settings_of(run: str):
        return run_settings(config.policy_settings(policy_of.get(run)), run, True, admin_key or None)

    _check_settings(config, [None, *policies], [*runs, *policies][0])  # refused before anything starts
    url = resolve_database_url(config.store.url)
    quiet_logs()

    def lead():
        upgrade_store(url)
        try:
            asyncio.run(_check_names(url, runs, policies))
        except LookupError as exc:
            raise fail(str(exc)) from None
        source = _named(runs, policies, policy_of)
        return asyncio.run(_train(url, settings_of, source, config.poll_interval_s, Hooks(), config.metrics_port))

    try:
        results = _on_every_rank(lead)
    except (LearnerError, ConfigError) as exc:
        raise fail(str(exc)) from None
    if results is not None:  # None: a following rank
        _print_results(results)


def _check_settings(config, policies: list[str | None], run: str) -> None:
    """Each policy's settings as ``run``'s, refused (the CLI's error) where they cannot train beside others."""
    import os

    from learner.config import ConfigError
    from learner.loop import LearnerError
    from learner.policy_followers import refuse_sharded

    try:
        for policy in policies:
            settings = run_settings(config.policy_settings(policy), run, True, config.publish.admin_key or None)
            refuse_sharded(settings, int(os.environ.get("WORLD_SIZE", "1")))  # torchrun's, before the group is joined
    except (ConfigError, LearnerError) as exc:
        raise fail(str(exc)) from None


def _on_every_rank(lead):
    """``lead()``'s result on rank 0; under torchrun the other ranks follow it and get None."""
    from learner.policy_followers import follow_policies
    from learner.ranks import is_leader, process_group

    with process_group():
        if not is_leader():
            follow_policies()
            return None
        return lead()


def start_folder(
    runs: list[str], folder: Path, admin_key: str | None, database_url: str | None, metrics_port: int | None = None
) -> None:
    """Train each of ``runs`` once its job wrote its settings into ``folder`` (harnessrl.training.learner_folder):
    the one learner of a server's jobs, each policy on its job's own settings; a job's stop ends its run alone.
    ``metrics_port``: the learner's one Prometheus endpoint (the jobs' own metrics_port settings are not read).
    Under torchrun rank 0 trains and the other ranks follow it (learner.policy_followers)."""
    import asyncio

    from harnessrl.cli.train_job import quiet_logs
    from harnessrl.training.learner_folder import LearnerFolder
    from harnessrl.training.learner_settings import learner_settings
    from learner.config import ConfigError
    from learner.loop import LearnerError
    from learner.policies_loop import Hooks

    if not runs:
        raise fail("name the runs the folder's jobs train: --run RUN (repeatable) with --settings-dir")
    url = resolve_database_url(database_url)
    shared = LearnerFolder(folder)
    quiet_logs()

    def settings_of(run: str):
        found = shared.settings(run)
        return None if found is None else learner_settings(found, run, admin_key)

    def lead():
        upgrade_store(url)
        shared.claim()
        hooks = Hooks(stops=shared.stop_asked, on_end=shared.write_result)
        return asyncio.run(_train(url, settings_of, _named(runs, []), 1.0, hooks, metrics_port))

    try:
        results = _on_every_rank(lead)
    except (LearnerError, ConfigError) as exc:
        raise fail(str(exc)) from None
    if results is not None:  # None: a following rank
        _print_results(results)


def _print_results(results: dict) -> None:
    """Each policy's end, and the learner's peak resident memory (every policy's, the base model once)."""
    import resource

    for result in results.values():
        said = f": {result.error}" if result.error else ""
        console.print(
            f"{result.run} ({result.policy or '?'}): stopped ({result.reason}) at step {result.step}, "
            f"version {result.version}{said}"
        )
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    console.print(f"learner resident memory: {peak_gib:.2f} GiB at most, {len(results)} policies in one process")
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


def _named(runs: list[str], policies: list[str], policy_of: dict[str, str] | None = None):
    """The source of runs to train, made of the store: the named runs, and each named policy's runs as
    they are now (a new one joins); ``policy_of`` learns each run's policy."""

    def source_of(store):
        async def source() -> list[str]:
            summaries = await store.policies.summaries()
            if policy_of is not None:
                policy_of.update({run: s.name for s in summaries for run in s.runs})
            bound = [s.runs for s in summaries if s.name in policies]
            return list(dict.fromkeys([*runs, *(run for names in bound for run in names)]))

        return source

    return source_of


async def _train(url: str, settings_of, source_of, poll_interval_s: float, hooks, metrics_port: int | None):
    """``run_policies`` over the store at ``url``; ``settings_of(run)``: its resolved settings, None until
    there are; each run's held-out evaluation (eval_every) starts with its settings; ``metrics_port``: the
    process's one Prometheus endpoint, every policy's series labelled with its name."""
    from harnessrl.training.learner_settings import eval_thread
    from learner.loop import serve_exporter
    from learner.policies_loop import run_policies
    from store.store import Store

    exporter = serve_exporter(metrics_port)  # a taken port is refused here, before any model loads
    hooks = replace(hooks, metrics=exporter)
    store = Store.from_url(url)
    settings: dict = {}
    evaluators = []

    def config(run: str):
        if run not in settings:
            found = settings_of(run)
            if found is None:
                return None
            settings[run] = found
            evaluators.append(eval_thread(found, run, url))
        return settings[run]

    try:
        source = source_of(store)
        return await run_policies(config, store, source, hooks=hooks, poll_interval_s=poll_interval_s)
    finally:
        for evaluator in evaluators:
            if evaluator is not None:
                evaluator.stop()
        await store.close()
        if exporter is not None:
            exporter.close()

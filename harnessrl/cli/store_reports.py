"""What `harnessrl report` and `harnessrl health` do with their options: read a run (or a policy's calls) from
the store, unknown names and unreadable stores as CLI errors naming the fix, then write the run's curves or show
how faithfully its calls were captured. harnessrl/cli/store.py holds the options and their help."""

from __future__ import annotations

from pathlib import Path

from harnessrl.cli.options import checked_policy, console, fail, resolve_database_url, with_store


def write_run_report(run: str, out: Path, database_url: str | None) -> None:
    """Plot ``run``'s curves into ``out`` and print their paths last (on stdout, for scripts); the notes and a
    warm-started run's phases go to the console before them."""
    from harnessrl.reports.curves import write_report

    data, held_out, warm_up = _report_data(run, resolve_database_url(database_url))
    result = write_report(data, out, held_out, warm_up)
    if warm_up is not None:  # a quickstart --warm-start run: its phases
        from harnessrl.reports.curves import warm_start_lines

        for line in warm_start_lines(warm_up, data):
            console.print(line, markup=False, highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    for path in result.paths:
        print(path)


def _report_data(run: str, url: str):
    """The run's report data, its held-out results and its warm-up run's data (None without one). A store the
    report's queries fail on is most likely an older schema: the message says to upgrade it."""
    from sqlalchemy.exc import DBAPIError

    from harnessrl.evaluation.periodic import held_out_results
    from harnessrl.training.warm_start import warm_up_run

    async def work(store):
        data = await store.reports.gather(run)
        if data is None:
            known = ", ".join(await store.reports.known_runs()) or "none"
            raise fail(f"no run named {run!r} in {url} (runs: {known}); `harnessrl ls runs` lists them")
        return data, await held_out_results(store, run), await store.reports.gather(warm_up_run(run))

    try:
        return with_store(url, work)
    except DBAPIError as exc:
        raise fail(
            f"could not read {url}: {exc.orig}; check --database-url, or run `harnessrl db upgrade` on an older store"
        ) from None


def show_capture_health(
    run: str | None, policy: str | None, model: Path | None, skew_calls: int, database_url: str | None
) -> None:
    """Render the capture health of ``run``'s (or ``policy``'s) calls; with ``model``, the re-tokenization skew
    of its latest ``skew_calls`` calls; once the learner trained them, their train/inference mismatch."""
    from harnessrl.reports.views import health_table, mismatch_table, render, skew_table

    if (run is None) == (policy is None):
        raise fail("name what to check: --run NAME or --policy NAME (`harnessrl ls runs`, `harnessrl ls policies`)")
    policy = checked_policy(policy)
    url = resolve_database_url(database_url)
    tokenizer = _tokenizer(model) if model is not None else None
    captured, calls, mismatch = _health_data(url, run, policy, skew_calls if tokenizer else 0)
    subject = f"run {run!r}" if run is not None else f"policy {policy!r}"
    render(health_table(subject, captured))
    if tokenizer is not None:
        from harnessrl.reports.retokenization import retokenization_skew

        render(skew_table(subject, retokenization_skew(tokenizer, calls)))
    if mismatch:
        render(mismatch_table(subject, mismatch))


def _health_data(url: str, run: str | None, policy: str | None, skew_calls: int):
    """The capture health, the latest ``skew_calls`` calls (0: none read, no tokenizer to re-render them) and
    the mismatch summary of ``run`` or ``policy``, each name checked against the store first."""

    async def work(store):
        run_id = None if run is None else await _known_run(store, run, url)
        if policy is not None:
            await _known_policy(store, policy)
        calls = await store.health.latest_policy_calls(run_id, skew_calls, policy=policy) if skew_calls else []
        captured = await store.health.capture_health(run_id, policy=policy)
        return captured, calls, await store.mismatch.summary(run_id, policy=policy)

    return with_store(url, work)


async def _known_run(store, run: str, url: str) -> int:
    run_id = await store.listings.run_id(run)
    if run_id is None:
        raise fail(f"no run named {run!r} in {url}; `harnessrl ls runs` lists them")
    return run_id


async def _known_policy(store, policy: str) -> None:
    from store.policies import UnknownPolicy

    try:
        await store.policies.check_known(policy)
    except UnknownPolicy as exc:
        raise fail(f"--policy: {exc}") from None


def _tokenizer(model: Path):
    """``model``'s tokenizer, or the CLI message saying what is missing or why it does not load."""
    from gateway.model_tokenizer import TokenizerMissing, model_tokenizer

    try:
        return model_tokenizer(model)
    except TokenizerMissing as exc:
        raise fail(f"--model {exc}") from None
    except (OSError, ValueError) as exc:
        raise fail(f"--model {model}: its tokenizer does not load ({exc})") from None

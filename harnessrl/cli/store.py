"""Commands on the trajectory store: `ls`, `show`, `report`, `health`, `export` and the `db` sub-app (upgrade,
prune); harnessrl/cli/store_reports.py does what `report` and `health` ask."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harnessrl.cli.job_config import config_command
from harnessrl.cli.options import (
    DatabaseUrl,
    console,
    fail,
    resolve_admin_key,
    resolve_database_url,
    upgrade_store,
    with_store,
)
from harnessrl.config.listing import ListConfig

db_app = typer.Typer(help="The trajectory store.", no_args_is_help=True)


@config_command(ListConfig)
def ls(config: ListConfig) -> None:
    """List policies (every adapter lineage the server knows, with the runs and live users bound to it), runs,
    groups or rollouts, filtered as GET /admin/policies, /api/runs, /api/groups and /api/rollouts are."""
    from harnessrl.reports.remote_views import GatewayReadError, gateway_list_view
    from harnessrl.reports.views import list_view, render

    what, where, limit = config.what, config.where(), config.limit
    try:
        if config.gateway.url:
            render(
                gateway_list_view(config.gateway.url, resolve_admin_key(config.gateway.admin_key), what, where, limit)
            )
        else:
            url = resolve_database_url(config.store.url)
            render(with_store(url, lambda store: list_view(store, what, where, limit)))
    except (ValueError, GatewayReadError) as exc:
        raise fail(str(exc)) from None


def show(
    what: Annotated[str, typer.Argument(help="rollout")],
    rollout_id: Annotated[int, typer.Argument(help="The rollout's id")],
    model: Annotated[Path | None, typer.Option(help="Model folder, to decode tokens")] = None,
    tokens: Annotated[int, typer.Option(help="Sampled tokens shown per call")] = 40,
    database_url: DatabaseUrl = None,
) -> None:
    """Show a rollout: its conversation, call by call, with a token table."""
    from harnessrl.reports.views import render, rollout_view

    if what != "rollout":
        raise fail(f"show knows `rollout ID`, not {what!r}")
    decode = _decoder(model)
    try:
        render(
            with_store(
                resolve_database_url(database_url), lambda store: rollout_view(store, rollout_id, decode, tokens)
            )
        )
    except ValueError as exc:
        raise fail(str(exc)) from None


def report(
    run: Annotated[str, typer.Option(help="The run to plot")],
    out: Annotated[Path, typer.Option(help="Folder for the PNG files")],
    database_url: DatabaseUrl = None,
) -> None:
    """Plot a run's reward, staleness and throughput curves as PNG files; print their paths."""
    from harnessrl.cli.store_reports import write_run_report

    write_run_report(run, out, database_url)


def health(
    run: Annotated[str | None, typer.Option(help="The run to check")] = None,
    policy: Annotated[
        str | None, typer.Option(help="Check every call this policy served instead (all its runs and live keys)")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(help="Model folder: also re-render the latest calls with its tokenizer (re-tokenization skew)"),
    ] = None,
    skew_calls: Annotated[int, typer.Option(min=1, help="How many of the latest calls --model re-renders")] = 200,
    database_url: DatabaseUrl = None,
) -> None:
    """How faithfully a run's (or a policy's) calls were captured, per harness and model: the later turns
    that extend the previous call exactly, forks (and their drift), false forks (re-rendered history),
    retries, side calls; with --model, how often a text pipeline would have trained on other ids than the
    engine's; and, once the learner trained them, the train/inference mismatch per harness, model and version."""
    from harnessrl.cli.store_reports import show_capture_health

    show_capture_health(run, policy, model, skew_calls, database_url)


def export(
    run: Annotated[str, typer.Option(help="The run to export")],
    out: Annotated[Path, typer.Option(help="Output file")],
    format: Annotated[
        str, typer.Option("--format", help="jsonl, parquet or openenv (one TrainingTrace per rollout)")
    ] = "jsonl",
    model: Annotated[Path | None, typer.Option(help="Model folder, to decode prompt and completion text")] = None,
    include_side: Annotated[bool, typer.Option(help="Also export side calls (titles, summaries)")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Write a run's training samples (one per root-to-leaf path of its call graph)."""
    from harnessrl.reports.export import export_run

    if format not in ("jsonl", "parquet", "openenv"):
        raise fail(f"--format must be jsonl, parquet or openenv, not {format!r}")
    decode = _decoder(model)
    url = resolve_database_url(database_url)

    async def work(store) -> int:
        if not await store.listings.run_exists(run):
            raise fail(f"no run named {run!r} in {url}; GET /api/runs lists them")
        return await export_run(store, run, format, out, include_side, decode)

    count = with_store(url, work)
    what = "rollouts (OpenEnv training traces)" if format == "openenv" else "samples"
    console.print(f"wrote {count} {what} of run {run!r} to {out}")


def _decoder(model: Path | None):
    """Token ids -> text with the model folder's tokenizer (the gateway's decoder), or None without one."""
    if model is None:
        return None
    from gateway.decoding import TokenDecoder

    try:
        return TokenDecoder.load(model).decode
    except FileNotFoundError as exc:
        raise fail(str(exc)) from None


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseUrl = None) -> None:
    """Apply the store's migrations."""
    url = resolve_database_url(database_url)
    upgrade_store(url)
    console.print(f"database is up to date: {url}")


@db_app.command("prune")
def db_prune(
    run: Annotated[str | None, typer.Option(help="Only this run (pruned whole: its learner records too)")] = None,
    older_than: Annotated[str | None, typer.Option(help="Rollouts that ended this long ago: 30m, 12h, 7d")] = None,
    status: Annotated[str | None, typer.Option(help="Only rollouts that ended so: finished, failed, cancelled")] = None,
    dry_run: Annotated[bool, typer.Option(help="Count what would go; delete nothing")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete ended rollouts and their calls (never running ones, nor groups the learner has not consumed)."""
    from store.retention import PruneFilter, parse_age

    if run is None and older_than is None and status is None:
        raise fail("say what to prune: --run NAME, --older-than AGE (e.g. 7d) and/or --status STATUS")
    try:
        where = PruneFilter(run, parse_age(older_than) if older_than else None, status)
    except ValueError as exc:
        raise fail(str(exc)) from None
    result = with_store(resolve_database_url(database_url), lambda store: store.retention.prune(where, dry_run))
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {result.rollouts} rollouts and {result.calls} calls; kept {result.kept_for_learner} "
        f"in groups the learner has not consumed"
    )

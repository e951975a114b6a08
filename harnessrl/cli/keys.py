"""The `keys` sub-app (live keys: an agent's everyday API key, each of its sessions a rollout) and
`feedback` (a late reward for such a session, through a gateway)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harnessrl.cli.options import (
    DatabaseUrl,
    PolicyOption,
    checked_policy,
    console,
    fail,
    resolve_admin_key,
    resolve_database_url,
    with_store,
)
from store.live_keys import live_run
from store.passk import policy_label
from store.run_settings import RunConflict

keys_app = typer.Typer(
    help="Live keys: an agent's everyday API key, each of its sessions a rollout.", no_args_is_help=True
)
User = Annotated[str, typer.Option("--user", help="Whose key: sessions, feedback and `forget` go by it")]


@keys_app.command("create")
def create(
    user: User,
    run: Annotated[
        str | None, typer.Option(help="The run its sessions go to (default: live, or live-POLICY with --policy)")
    ] = None,
    policy: PolicyOption = None,
    train: Annotated[bool, typer.Option("--train/--no-train", help="May its sessions be trained on (opt-in)")] = False,
    idle_minutes: Annotated[float, typer.Option(min=0.1, help="A call after this much silence opens a session")] = 30,
    database_url: DatabaseUrl = None,
) -> None:
    """A new live key: printed once (only its sha256 is kept). The agent uses it as its API key with the
    gateway's /v1 as its base URL; no rollout needs creating. With --policy its sessions are served (and,
    with --train, train) that policy only: a user's own adapter (`--policy ada`), or a team's shared one."""
    policy = checked_policy(policy)
    run = run or live_run(policy)
    try:
        key, record = with_store(
            resolve_database_url(database_url),
            lambda store: store.live_keys.create(user, run, train, idle_minutes * 60, policy),
        )
    except RunConflict as exc:
        raise fail(str(exc)) from None
    console.print(
        f"live key {record.id} for {user!r}, run {run!r}, policy {record.policy!r}, training "
        f"{'on' if train else 'off'}: point the agent's base URL at the gateway's /v1 and give it this key "
        f"(shown only now)"
    )
    print(key)


@keys_app.command("list")
def list_keys(
    user: Annotated[str | None, typer.Option(help="Only this user's")] = None, database_url: DatabaseUrl = None
):
    """The live keys (never the keys themselves): user, run, training, idle time, revoked."""
    from rich.table import Table

    table = Table("id", "user", "run", "policy", "train", "idle min", "created", "revoked")
    for k in with_store(resolve_database_url(database_url), lambda store: store.live_keys.list(user)):
        revoked = f"{k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else ""
        table.add_row(
            str(k.id),
            k.user,
            k.run,
            k.policy,
            "yes" if k.train else "no",
            f"{k.idle_s / 60:g}",
            f"{k.created_at:%Y-%m-%d %H:%M}",
            revoked,
        )
    console.print(table)


@keys_app.command("revoke")
def revoke(user: User, database_url: DatabaseUrl = None) -> None:
    """Revoke every key of USER: refused from their next call on; their sessions stay."""
    ids = with_store(resolve_database_url(database_url), lambda store: store.live_keys.revoke(user))
    if not ids:
        raise fail(f"{user!r} has no valid live key (`harnessrl keys list`)")
    console.print(f"revoked {len(ids)} key(s) of {user!r}")


@keys_app.command("forget")
def forget(user: User, database_url: DatabaseUrl = None) -> None:
    """Delete everything of USER: their keys, every session (rollout) and its calls."""
    gone = _scrubbing(database_url, lambda store: store.live_keys.forget(user), f"forgot {user!r}")
    console.print(f"forgot {user!r}: {gone.keys} key(s), {gone.rollouts} session(s), {gone.calls} call(s)")


@keys_app.command("scan")
def scan(
    run: Annotated[str, typer.Option(help="The run of the sessions")] = "live",
    pattern: Annotated[
        list[str] | None, typer.Option(help="A regular expression of your own secrets, repeatable")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Scan the ended sessions not scanned yet for secrets and credentials: a session with any finding is
    excluded from training and redacted (bodies and token ids gone; only the kinds found are kept)."""
    import re

    from harnessrl.live.privacy import scan_sessions

    try:
        patterns = [re.compile(p) for p in pattern or []]
    except re.error as exc:
        raise fail(f"--pattern {exc.pattern!r} is no regular expression: {exc}") from None
    scans = _scrubbing(database_url, lambda store: scan_sessions(store, run, patterns), "redacted")
    flagged = [s for s in scans if s.findings]
    for s in flagged:
        console.print(f"session {s.rollout_id}: {', '.join(s.findings)}: redacted, never trains")
    console.print(
        f"scanned {len(scans)} session(s) of {run!r}: {len(flagged)} redacted, {len(scans) - len(flagged)} clean"
    )


def _scrubbing(database_url: str | None, work, done: str):
    """``work(store)``, which ends by scrubbing the database's files (``store.scrub``): a scrub a reader
    held up is a CLI error saying what was ``done`` already."""
    from store.scrub import ScrubIncomplete

    try:
        return with_store(resolve_database_url(database_url), work)
    except ScrubIncomplete as exc:
        raise fail(f"{done}, but {exc}") from None


Run = Annotated[str | None, typer.Option(help="The run of the live sessions (default: live, or live-POLICY)")]


def _live_run(run: str | None, policy: str | None) -> str:
    return run or live_run(checked_policy(policy))


@keys_app.command("promote")
def promote(
    version: Annotated[int, typer.Argument(min=1, help="The candidate policy version")],
    eval_json: Annotated[
        Path, typer.Option("--eval", exists=True, dir_okay=False, help="eval.json of `harnessrl eval` on both")
    ],
    margin: Annotated[float, typer.Option(min=0.0, help="How much worse than the version it replaces it may be")] = 0.0,
    metric: Annotated[str, typer.Option(help="pass_at_k | pass_at_1")] = "pass_at_k",
    canary: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Serve it to this fraction of new sessions only")
    ] = 0.0,
    run: Run = None,
    policy: PolicyOption = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Serve VERSION of the live run's policy to its keys if it passes the gate: an evaluation
    (`harnessrl eval --policies ada@vOLD,ada@vNEW`) shows it no worse than the version it replaces, within
    --margin. With --canary F it serves F of new sessions first (promote again without --canary to serve
    all). Other policies' live runs are untouched."""
    import json

    from harnessrl.live.promotion import gate

    url, run = resolve_database_url(database_url), _live_run(run, policy)
    serving = _serving(url, run)
    label = policy_label(version, serving.policy)
    try:
        decision = gate(json.loads(eval_json.read_text()), serving.promoted, version, margin, metric, serving.policy)
    except (ValueError, KeyError) as exc:
        raise fail(str(exc)) from None
    if not decision.promote:
        raise fail(f"{label} {decision.why}")
    if canary:
        _serve(url, run, serving.promoted, "", (version, canary))
        console.print(f"{label} serves {canary:.0%} of new live sessions of {run!r} (canary): {decision.why}")
        return
    _serve(url, run, version, decision.why)
    console.print(f"{label} now serves every new live session of {run!r}: {decision.why}")


@keys_app.command("rollback")
def rollback(
    version: Annotated[int, typer.Argument(min=0, help="An earlier version (0: the base model)")],
    run: Run = None,
    policy: PolicyOption = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Serve an earlier VERSION to new live sessions at once (no gate), ending any canary."""
    run = _live_run(run, policy)
    serving = _serve(resolve_database_url(database_url), run, version, "rollback")
    console.print(f"new live sessions of {run!r} are served {policy_label(serving.promoted, serving.policy)}")


@keys_app.command("report")
def report(run: Run = None, policy: PolicyOption = None, database_url: DatabaseUrl = None) -> None:
    """A run's live sessions per user (rewarded, excluded and why, trained) and what serves them."""
    from rich.table import Table

    run = _live_run(run, policy)

    async def read(store):
        return await store.live_keys.report(run), await store.live_keys.serving(run)

    users, serving = with_store(resolve_database_url(database_url), read)
    table = Table(
        "user", "sessions", "running", "rewarded", "mean reward", "redacted", "unscanned", "trainable", "trained"
    )
    for u in users:
        mean = "" if u.reward_mean is None else f"{u.reward_mean:.3f}"
        redacted = (
            f"{u.redacted} ({', '.join(f'{k}: {n}' for k, n in sorted(u.findings.items()))})" if u.redacted else "0"
        )
        counts = (u.sessions, u.running, u.rewarded)
        table.add_row(u.user, *map(str, counts), mean, redacted, str(u.unscanned), str(u.trainable), str(u.trained))
    console.print(table)
    label = policy_label(serving.promoted, serving.policy)
    canary = (
        f", canary {policy_label(serving.canary, serving.policy)} for {serving.canary_fraction:.0%}"
        if serving.canary is not None
        else ""
    )
    console.print(f"new sessions of {run!r} are served {label}{canary}")
    for h in serving.history:
        console.print(f"  {h['at'][:16]}  v{h['version']}: {h['why']}")


def _serve(url: str, run: str, version: int, why: str, canary: tuple[int, float] | None = None):
    """Serve ``version`` (published, or 0) to the run's new live sessions, or a CLI error naming why not."""

    async def serve(store):
        policy = (await store.live_keys.serving(run)).policy
        for v in (version, *(canary[:1] if canary else ())):
            if v and await store.adapters.get(policy, v) is None:
                raise LookupError(f"{policy_label(v, policy)} was never published to this store")
        return await store.live_keys.serve(run, version, why, canary)

    try:
        return with_store(url, serve)
    except LookupError as exc:
        raise fail(str(exc)) from None


def feedback(
    score: Annotated[float, typer.Argument(help="1 (it worked), 0 (it did not) or any finite score")],
    rollout: Annotated[
        int | None, typer.Option(help="The session's rollout (x-harnessrl-rollout-id of its answers)")
    ] = None,
    call: Annotated[int | None, typer.Option(help="One of the session's calls (x-harnessrl-call-id)")] = None,
    user: Annotated[str | None, typer.Option(help="The user's most recent session (what a git hook knows)")] = None,
    note: Annotated[str | None, typer.Option(help="Why, kept with the reward")] = None,
    gateway: Annotated[str, typer.Option(help="The gateway's URL")] = "http://127.0.0.1:8000",
    admin_key: Annotated[str | None, typer.Option(envvar="HARNESSRL_ADMIN_KEY", help="Its admin key")] = None,
) -> None:
    """A late reward for a live session: it joins the session's rollout (POST /api/feedback)."""
    import asyncio

    from contracts.gateway_client import GatewayClient, GatewayRefused, GatewayUnreachable

    named = {k: v for k, v in {"rollout_id": rollout, "call_id": call, "user": user}.items() if v is not None}
    if len(named) != 1:
        raise fail("name the session with exactly one of --rollout ID, --call ID and --user NAME")

    async def post() -> dict:
        client = GatewayClient(gateway, resolve_admin_key(admin_key))
        try:
            return await client.feedback(score, named, note)
        finally:
            await client.close()

    try:
        recorded = asyncio.run(post())
    except (GatewayUnreachable, GatewayRefused) as exc:
        raise fail(str(exc)) from None
    console.print(f"rollout {recorded['rollout_id']}: reward {recorded['reward']} ({recorded['rewards']})")


def _serving(url: str, run: str):
    """What serves a live run now; a CLI error when no live key has that run."""

    async def read(store):
        if not await store.listings.run_exists(run):
            keys = await store.live_keys.list()
            runs = sorted({k.run for k in keys}) or ["none yet"]
            raise LookupError(
                f"no live run {run!r}: live runs are {', '.join(runs)} (create a key with "
                f"`harnessrl keys create --user NAME --policy POLICY`)"
            )
        return await store.live_keys.serving(run)

    try:
        return with_store(url, read)
    except LookupError as exc:
        raise fail(str(exc)) from None

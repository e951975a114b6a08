"""`harnessrl ls`, `show` and `health`: runs, groups, rollouts, a rollout's calls and a run's capture
health, with rich."""

from __future__ import annotations

import json
from datetime import datetime
from itertools import repeat

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gateway.api.conversation import rollout_conversation
from harnessrl.reports.retokenization import RetokenizationSkew
from store.capture_modes import capture_of
from store.health import CaptureHealth
from store.listings import GroupFilter, RolloutFilter
from store.mismatch import MismatchSummary
from store.policies import PolicySummary, adapter_name
from store.rewards import VERIFIER, verifier_metrics
from store.store import Store

LIMIT = 50
LISTINGS = "policies, runs, groups or rollouts"


def policy_row(summary: PolicySummary) -> dict:
    """A policy as the store knows it, in ``GET /admin/policies``' shape: the newest loaded version is the
    one its gateways serve (the store has no gateway's view of in-flight loads)."""
    return {
        "policy": summary.name,
        "current_version": max(summary.loaded, default=0),
        "loaded": {str(v): adapter_name(summary.name, v) for v in summary.loaded},
        "published": summary.versions,
        "runs": list(summary.runs),
        "live_users": list(summary.live_users),
    }


async def list_view(store: Store, what: str, where: RolloutFilter, limit: int = LIMIT) -> Table:
    """A table of runs, groups or rollouts; ``where`` filters rollouts (groups use run, task, status).
    Rows go through the REST API's own views, so ``ls --gateway`` shows the same table."""
    from gateway.api.router import rollout_summary
    from gateway.api.runs import group_view, run_views

    listings = store.listings
    if what == "policies":
        return listing_table(what, [policy_row(summary) for summary in await store.policies.summaries()])
    if what == "runs":
        views = await run_views(listings, await listings.runs(where.run, 0, limit, newest_first=True))
    elif what == "groups":
        groups = GroupFilter(run=where.run, task=where.task, status=where.status)
        views = [group_view(g, run, task, []) for g, run, task in await listings.groups(groups, 0, limit)]
    elif what == "rollouts":
        views = [rollout_summary(*row) for row in await listings.rollouts(where, 0, limit)]
    else:
        raise ValueError(f"ls shows {LISTINGS}, not {what!r}")
    return listing_table(what, [view.model_dump(mode="json") for view in views])


def listing_table(what: str, rows: list[dict]) -> Table:
    """``harnessrl ls``'s table of ``rows`` in the REST API's JSON shape (GET /api/runs, /groups, /rollouts)."""
    if what == "policies":
        table = _table("policy", "serves", "loaded", "published", "runs", "live users")
        for p in rows:
            loaded = sorted(int(v) for v in p["loaded"] if int(v))
            table.add_row(
                p["policy"], f"v{p['current_version']}" if p["current_version"] else "base",
                ", ".join(f"v{v}" for v in loaded), str(p["published"]), ", ".join(p["runs"]),
                ", ".join(p["live_users"]),
            )  # fmt: skip
        return table
    if what == "runs":
        table = _table("id", "name", "capture", "created", "rollouts", "finished", "reward", "last activity")
        table.columns[1].no_wrap = True  # a name is what one copies into --run: never broken across lines
        for r in rows:
            table.add_row(
                str(r["id"]), r["name"], capture_of(r["config"]),
                _when(r["created_at"], "%Y-%m-%d %H:%M"), str(r["rollouts"]), str(r["rollouts_finished"]),
                _reward(r["reward_mean"]), _when(r["last_activity"], "%Y-%m-%d %H:%M:%S"),
            )  # fmt: skip
    elif what == "groups":
        table = _table("id", "run", "task", "group", "status", "size", "ready")
        for g in rows:
            table.add_row(
                str(g["id"]), g["run"], g["task"], g["name"], g["status"], str(g["size"] or ""),
                _when(g["ready_at"], "%H:%M:%S"),
            )  # fmt: skip
    else:
        table = _table("id", "run", "task", "group", "status", "reward", "error")
        for r in rows:
            table.add_row(
                str(r["id"]),
                r["run"],
                r["task"],
                r["group"],
                r["status"],
                _reward(r["reward"]),
                (r["error"] or "")[:60],
            )
    return table


def _when(value: str | None, layout: str) -> str:
    return "" if value is None else f"{datetime.fromisoformat(value):{layout}}"


def _count_and_share(count: int, share: float | None, none: str = "") -> str:
    """ "7 (33.3%)"; ``none`` where there was nothing to take a share of."""
    return none if share is None else f"{count} ({share:.1%})"


def _reward(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


async def rollout_view(store: Store, rollout_id: int, decode=None, tokens: int = 40) -> Group:
    found = await store.get_rollout(rollout_id)
    if found is None:
        raise ValueError(f"rollout {rollout_id} not found")
    rollout, run, task, group, num_calls = found
    header = Text(
        f"rollout {rollout.id}  run {run}  task {task}  group {group}  {rollout.status}  "
        f"reward {rollout.reward}  calls {num_calls}",
        style="bold",
    )
    parts = [header, _rewards_line(rollout.rewards)]
    if rollout.error:
        parts.append(Text(f"error: {rollout.error}", style="red"))
    if rollout.agent_exit_code is not None or rollout.agent_log:
        parts.append(_agent_panel(rollout))
    if VERIFIER in (rollout.reward_details or {}):
        parts.append(_verifier_panel(rollout.reward_details))
    parts.append(_conversation_panel(await rollout_conversation(store, rollout_id)))
    for call in await store.calls.page(rollout_id, 0, 1000):
        parts.append(_call_panel(call, decode, tokens))
    return Group(*parts)


def _rewards_line(rewards: dict | None) -> Text:
    components = "  ".join(f"{name} = {value}" for name, value in (rewards or {}).items())
    return Text(f"reward components: {components or 'none'}")


def _agent_panel(rollout) -> Panel:
    """The agent's exit status, its engine time and the tail of its own output, as the runner saw them."""
    engine = f"  engine time {rollout.engine_s:.1f} s" if rollout.engine_s is not None else ""
    lines = [
        Text(f"exit status {rollout.agent_exit_code}{engine}"),
        Text(rollout.agent_log or "(no output)", style="dim"),
    ]
    return Panel(Group(*lines), title="agent", title_align="left")


def _verifier_panel(reward_details: dict) -> Panel:
    """The verifier's exit status, its metrics (never part of the reward), error and output as stored."""
    detail = reward_details[VERIFIER]
    metrics = "  ".join(f"{name} = {value:g}" for name, value in verifier_metrics(reward_details).items())
    lines = [Text(f"exit status {detail.get('exit_code')}  metrics: {metrics or 'none'}")]
    if detail.get("error"):
        lines.append(Text(f"error: {detail['error']}", style="red"))
    lines.append(Text(detail.get("log") or "(no output)", style="dim"))
    return Panel(Group(*lines), title="verifier", title_align="left")


ROLE_STYLES = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "yellow"}


def _conversation_panel(messages: list[dict]) -> Panel:
    """The conversation as the agent saw it (any dialect, normalized), answers tagged with their call."""
    lines = []
    for m in messages:
        source = f" [call {m['call_id']}]" if m.get("call_id") else ""
        result = f" for {m['tool_call_id']}" if m.get("tool_call_id") else ""
        lines.append(
            Text(f"{m['role']}{result}{source}: {_short(m['content'], 400)}", style=ROLE_STYLES.get(m["role"], ""))
        )
        for tool_call in m.get("tool_calls") or []:
            lines.append(Text(f"  tool call {tool_call['name']}({_short(tool_call['arguments'])})", style="yellow"))
    return Panel(
        Group(*lines) if lines else Text("no calls yet", style="dim"), title="conversation", title_align="left"
    )


def _call_panel(call, decode, tokens: int) -> Panel:
    title = (
        f"call {call.id}  parent {call.parent_id}  {call.policy} v{call.policy_version}  {call.finish_reason}  "
        f"{call.num_prompt_tokens}+{call.num_output_tokens} tokens  {' '.join(call.tags)}"
    )
    if call.fork_of is not None:
        title += f"  fork of {call.fork_of} ({call.drift_tokens} drift tokens)"
    return Panel(_token_table(call, decode, tokens), title=title, title_align="left")


def _token_table(call, decode, tokens: int) -> Table:
    table = _table("pos", "token", "id", "logprob")
    prompt_len = call.num_prompt_tokens
    for n, (token_id, logprob) in enumerate(zip(call.output_ids[:tokens], call.output_logprobs or repeat(None))):
        table.add_row(
            str(prompt_len + n), repr(decode([token_id])) if decode else "", str(token_id), _logprob_text(logprob)
        )
    return table


def _logprob_text(logprob: float | None) -> Text:
    if logprob is None:  # a teacher's or demonstration's call: no sampler log-prob
        return Text("-", style="dim")
    return Text(f"{logprob:.3f}", style="green" if logprob > -0.5 else "yellow" if logprob > -2.5 else "red")


def _short(value, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if value is not None else ""
    return text if len(text) <= limit else text[:limit] + "…"


def health_table(subject: str, rows: list[CaptureHealth]) -> Table:
    """A run's (or policy's: ``subject`` names which) capture health per harness and model (store.health)."""
    # later: main-loop turns after each rollout's first; exact: those extending the previous call exactly
    table = _table("harness", "model", "rollouts", "calls", "later", "exact", "forks", "drift", "false forks",
                   "retried", "side calls")  # fmt: skip
    table.title = f"capture health of {subject}"
    for row in rows:
        table.add_row(
            row.harness or "",
            row.model,
            str(len(row.rollouts)),
            str(row.calls),
            str(row.later_turns),
            _count_and_share(row.extending_turns, row.extension_rate),
            str(row.forks),
            str(row.drift_tokens),
            str(row.false_forks),
            str(row.retried),
            _count_and_share(row.side_calls, row.side_call_share, none="0"),
        )
    return table


def skew_table(subject: str, rows: list[RetokenizationSkew]) -> Table:
    """How often re-rendering a run's latest calls as text gives other ids (harnessrl.reports.retokenization)."""
    table = _table("harness", "model", "calls", "re-rendered", "prompt differs", "output differs")
    table.title = f"re-tokenization skew of {subject} (what a text pipeline would train on)"
    for row in rows:
        table.add_row(
            row.harness or "",
            row.model,
            str(row.calls),
            str(row.rendered),
            _count_and_share(row.prompt_skewed, row.prompt_share),
            _count_and_share(row.output_skewed, row.output_share),
        )
    return table


def mismatch_table(subject: str, rows: list[MismatchSummary]) -> Table:
    """A run's (or policy's) train/inference mismatch per harness, model and version (store.mismatch)."""
    table = _table("harness", "model", "version", "calls", "tokens", "mean |Δ|", "max |Δ|", "k3", "over 0.1")
    table.title = f"train/inference mismatch of {subject} (nats per token, learner - sampler)"
    for row in rows:
        table.add_row(
            row.harness or "",
            row.model,
            f"v{row.version}",
            str(row.calls),
            str(row.tokens),
            *(f"{value:.3g}" if value is not None else "" for value in (row.mean_abs, row.max_abs, row.k3)),
            f"{row.frac_over:.1%}" if row.frac_over is not None else "",
        )
    return table


def _table(*columns: str) -> Table:
    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column)
    return table


def render(renderable) -> None:
    Console().print(renderable)

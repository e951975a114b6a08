"""REST routes for runs (listing, summary, learner steps) and groups."""

from __future__ import annotations

import dataclasses

from fastapi import Query

from gateway.api.params import After, Int64, Limit, Order, StepAfter, page_of
from gateway.api.protocol import (
    CaptureHealthView,
    GroupRollout,
    GroupView,
    LearnerStepView,
    MismatchSummaryView,
    Page,
    PolicyResultView,
    PolicyTaskView,
    RunSummary,
    RunView,
    TaskPolicyCell,
)
from gateway.errors import NotFound
from gateway.state import StateDep
from store.listings import GroupFilter, Listings, RunCounts
from store.passk import TaskCount, policy_label, policy_results
from store.records import StoredGroup, StoredRun


def run_view(run: StoredRun, counts: RunCounts) -> RunView:
    return RunView(
        id=run.id, name=run.name, config=run.config or {}, created_at=run.created_at, **dataclasses.asdict(counts)
    )


async def run_views(listings: Listings, runs: list[StoredRun]) -> list[RunView]:
    """Runs with their rollout counts (one query for all of them)."""
    counts = await listings.run_counts([r.id for r in runs])
    return [run_view(r, counts.get(r.id, RunCounts())) for r in runs]


async def list_runs(
    state: StateDep,
    name: str | None = Query(None, description="substring of the run's name"),
    order: Order = "asc",
    after: After = 0,
    limit: Limit = 100,
) -> Page[RunView]:
    listings = state.store.listings
    runs = await listings.runs(name, after, limit, newest_first=order == "desc")
    return page_of(await run_views(listings, runs), limit)


async def _run(state, name: str) -> StoredRun:
    run = await state.store.listings.run(name)
    if run is None:
        raise NotFound(f"run {name!r} not found")
    return run


async def get_run(name: str, state: StateDep) -> RunView:
    [view] = await run_views(state.store.listings, [await _run(state, name)])
    return view


async def get_run_summary(name: str, state: StateDep) -> RunSummary:
    run = await _run(state, name)
    cells = await state.store.evaluations.pinned_task_counts(run.id)
    metrics = await state.store.evaluations.pinned_metric_means(run.id)
    return RunSummary(
        run=run.name,
        **await state.store.summary.run_summary(run.id),
        policies=policy_views(cells, metrics),
        policy_tasks=task_views(cells),
    )


async def get_run_mismatch(name: str, state: StateDep) -> list[MismatchSummaryView]:
    """The run's train/inference mismatch per (harness, model, version), from the calls the learner trained."""
    run = await _run(state, name)
    return [MismatchSummaryView(**dataclasses.asdict(row)) for row in await state.store.mismatch.summary(run.id)]


async def get_run_health(name: str, state: StateDep) -> list[CaptureHealthView]:
    """The run's capture health per (harness, model): exact extensions, forks, false forks, retries."""
    run = await _run(state, name)
    return [
        CaptureHealthView(
            **{k: v for k, v in dataclasses.asdict(row).items() if k != "rollouts"},
            rollouts=len(row.rollouts),
            extension_rate=row.extension_rate,
        )
        for row in await state.store.health.capture_health(run.id)
    ]


def policy_views(cells: list[TaskCount], metrics: dict[str, dict[str, float]] | None = None) -> list[PolicyResultView]:
    return [
        PolicyResultView(
            policy=r.label,
            version=r.version,
            tasks=r.tasks,
            rollouts=r.n,
            passed=r.passed,
            failures=r.failures,
            k=r.k,
            pass_at_1=r.pass_at_1,
            pass_at_k=r.pass_at_k,
            reward_mean=r.reward.mean,
            reward_low=r.reward.low,
            reward_high=r.reward.high,
            metrics=(metrics or {}).get(r.label, {}),
        )
        for r in policy_results(cells)
    ]


def task_views(cells: list[TaskCount]) -> list[PolicyTaskView]:
    tasks: dict[str, dict[str, TaskPolicyCell]] = {}
    for cell in cells:
        tasks.setdefault(cell.task, {})[policy_label(cell.version, cell.policy)] = TaskPolicyCell(
            rollouts=cell.n, passed=cell.passed
        )
    return [PolicyTaskView(task=task, policies=policies) for task, policies in sorted(tasks.items())]


async def list_run_steps(
    name: str, state: StateDep, after: StepAfter = -1, limit: Limit = 100
) -> Page[LearnerStepView]:
    run = await _run(state, name)
    steps = await state.store.listings.steps(run.id, after, limit)
    views = [LearnerStepView(step=s.step, metrics=s.metrics or {}, created_at=s.created_at) for s in steps]
    return page_of(views, limit, cursor=lambda view: view.step)


def group_view(group: StoredGroup, run: str, task: str, rollouts: list) -> GroupView:
    return GroupView(
        id=group.id,
        run=run,
        task=task,
        name=group.name,
        status=group.status,
        error=group.error,
        size=group.size,
        ready_at=group.ready_at,
        created_at=group.created_at,
        rollouts=[GroupRollout(id=r.id, status=r.status, reward=r.reward) for r in rollouts],
    )


async def list_groups(
    state: StateDep,
    run: str | None = None,
    task: str | None = None,
    status: str | None = None,
    after: After = 0,
    limit: Limit = 100,
) -> Page[GroupView]:
    listings = state.store.listings
    rows = await listings.groups(GroupFilter(run=run, task=task, status=status), after, limit)
    rollouts = await listings.group_rollouts([g.id for g, _, _ in rows])
    return page_of(
        [group_view(g, run_name, task_name, rollouts.get(g.id, [])) for g, run_name, task_name in rows], limit
    )


async def get_group(group_id: Int64, state: StateDep) -> GroupView:
    found = await state.store.listings.group(group_id)
    if found is None:
        raise NotFound(f"group {group_id} not found")
    group, run, task = found
    rollouts = await state.store.listings.group_rollouts([group.id])
    return group_view(group, run, task, rollouts.get(group.id, []))

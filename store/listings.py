"""Keyset-paged listings of runs, groups, rollouts, calls and learner steps, with their filters.

Shared by the REST API and `harnessrl ls`. Every listing is one query ordered by id (by step for
learner steps) with ``id > after`` (runs newest first: ``id < after``) and a ``LIMIT``: a page costs
the same on the first run and on a run of 10,000 rollouts. Call listings leave the token blobs and
bodies out unless asked; a page of runs or groups adds one IN query for its counts or rewards.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from types import SimpleNamespace

from sqlalchemy import Select, String, cast, exists, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store import prompt_delta
from store.arrays import unpack_ids, unpack_logprobs
from store.records import (
    RolloutOutcome,
    RolloutStatus,
    StoredCall,
    StoredGroup,
    StoredRollout,
    StoredRun,
    StoredStep,
    record_of,
)
from store.roles import role_runs, roles_array
from store.tables import Call, Group, LearnerStep, Rollout, Run, Task


@dataclass(frozen=True)
class RunCounts:
    """A run's rollouts in numbers, for a listing of runs (a run without rollouts: the defaults)."""

    rollouts: int = 0
    rollouts_finished: int = 0
    reward_mean: float | None = None  # over the rollouts with a reward
    last_activity: datetime | None = None  # the latest rollout's created_at


@dataclass(frozen=True)
class GroupFilter:
    run: str | None = None
    task: str | None = None
    status: str | None = None


@dataclass(frozen=True)
class RolloutFilter:
    run: str | None = None
    task: str | None = None
    group_id: int | None = None
    status: str | None = None
    harness: str | None = None  # rollout.meta["harness"]
    policy_version: int | None = None  # rollouts with a call sampled by this version
    reward_min: float | None = None  # inclusive
    reward_max: float | None = None  # inclusive


@dataclass(frozen=True)
class CallFilter:
    run: str | None = None
    rollout_id: int | None = None
    tag: str | None = None
    finish_reason: str | None = None
    dialect: str | None = None


# A call without its token blobs and bodies: what listings of many calls show.
CALL_COLUMNS = (
    Call.id,
    Call.rollout_id,
    Call.parent_id,
    Call.fork_of,
    Call.drift_tokens,
    Call.dialect,
    Call.model,
    Call.engine_model,
    Call.policy,
    Call.policy_version,
    Call.source,
    Call.num_prompt_tokens,
    Call.num_output_tokens,
    Call.finish_reason,
    Call.tags,
    Call.latency_ms,
    Call.temperature,
    Call.top_p,
    Call.adapter_digest,
    Call.created_at,
)
TOKEN_COLUMNS = (Call.prompt_ids, Call.prompt_offset, Call.output_ids, Call.output_logprobs, Call.prompt_roles)


def stored_call(source, tokens: bool = True, bodies: bool = False) -> StoredCall:
    """``source`` (a Call, or a row of ``CALL_COLUMNS`` plus ``TOKEN_COLUMNS`` with ``tokens``; its prompt
    and prompt roles already whole) as the store's record; token arrays and roles only with ``tokens``,
    request and response only with ``bodies``."""
    fields = {column.key: getattr(source, column.key) for column in CALL_COLUMNS}
    fields["tags"] = fields["tags"] or []
    if tokens:
        prompt_ids = unpack_ids(source.prompt_ids)
        fields.update(
            prompt_ids=prompt_ids,
            prompt_roles=role_runs(roles_array(source.prompt_roles, len(prompt_ids))),
            output_ids=unpack_ids(source.output_ids),
            output_logprobs=unpack_logprobs(source.output_logprobs),
        )
    else:
        fields.update(prompt_ids=[], prompt_roles=[], output_ids=[], output_logprobs=[])
    if bodies:
        fields.update(request=source.request, response=source.response)
    return StoredCall(**fields)


class Listings:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self.sessions = sessions

    async def run_id(self, run: str) -> int | None:
        """The id of the run named ``run``; None when there is none (the one lookup of a run by name)."""
        async with self.sessions() as session:
            return await session.scalar(select(Run.id).where(Run.name == run))

    async def run_exists(self, run: str) -> bool:
        return (await self.run_id(run)) is not None

    async def runs(self, name: str | None, after: int, limit: int, newest_first: bool = False) -> list[StoredRun]:
        """Runs by id, oldest first; ``newest_first`` pages down from ``after`` (0: from the newest)."""
        if newest_first:
            query = select(Run).order_by(Run.id.desc()).limit(limit)
            query = query.where(Run.id < after) if after else query
        else:
            query = select(Run).where(Run.id > after).order_by(Run.id).limit(limit)
        if name:
            query = query.where(Run.name.contains(name, autoescape=True))
        async with self.sessions() as session:
            return [record_of(StoredRun, run) for run in (await session.scalars(query)).all()]

    async def run_counts(self, run_ids: list[int]) -> dict[int, RunCounts]:
        """Rollout counts of each run, by id: one GROUP BY over the runs' rollouts (ix_rollouts_run_id)."""
        if not run_ids:
            return {}
        query = (
            select(
                Rollout.run_id,
                func.count(),
                func.count().filter(Rollout.status == RolloutStatus.FINISHED),
                func.avg(Rollout.reward),
                func.max(Rollout.created_at),
            )
            .where(Rollout.run_id.in_(run_ids))
            .group_by(Rollout.run_id)
        )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return {run_id: RunCounts(n, finished, mean, last) for run_id, n, finished, mean, last in rows}

    async def run(self, name: str) -> StoredRun | None:
        async with self.sessions() as session:
            run = (await session.scalars(select(Run).where(Run.name == name))).first()
        return None if run is None else record_of(StoredRun, run)

    async def steps(self, run_id: int, after: int, limit: int) -> list[StoredStep]:
        query = (
            select(LearnerStep)
            .where(LearnerStep.run_id == run_id, LearnerStep.step > after)
            .order_by(LearnerStep.step)
            .limit(limit)
        )
        async with self.sessions() as session:
            return [record_of(StoredStep, step) for step in (await session.scalars(query)).all()]

    async def groups(self, where: GroupFilter, after: int, limit: int) -> list[tuple[StoredGroup, str, str]]:
        """Groups with their run and task names, by id."""
        query = (
            select(Group, Run.name, Task.name)
            .join(Run, Run.id == Group.run_id)
            .join(Task, Task.id == Group.task_id)
            .where(Group.id > after)
            .order_by(Group.id)
            .limit(limit)
        )
        query = _equal(query, (Run.name, where.run), (Task.name, where.task), (Group.status, where.status))
        async with self.sessions() as session:
            return [(record_of(StoredGroup, row[0]), row[1], row[2]) for row in (await session.execute(query)).all()]

    async def group(self, group_id: int) -> tuple[StoredGroup, str, str] | None:
        query = (
            select(Group, Run.name, Task.name)
            .join(Run, Run.id == Group.run_id)
            .join(Task, Task.id == Group.task_id)
            .where(Group.id == group_id)
        )
        async with self.sessions() as session:
            row = (await session.execute(query)).first()
        return None if row is None else (record_of(StoredGroup, row[0]), row[1], row[2])

    async def group_rollouts(self, group_ids: list[int]) -> dict[int, list[RolloutOutcome]]:
        """The rollouts (id, status, reward) of each group, by id: one IN query for a page of groups."""
        if not group_ids:
            return {}
        query = (
            select(Rollout.group_id, Rollout.id, Rollout.status, Rollout.reward)
            .where(Rollout.group_id.in_(group_ids))
            .order_by(Rollout.id)
        )
        found: dict[int, list[RolloutOutcome]] = defaultdict(list)
        async with self.sessions() as session:
            for row in (await session.execute(query)).all():
                found[row.group_id].append(record_of(RolloutOutcome, row))
        return found

    async def run_rollouts(self, run: str, after: int, limit: int) -> list[tuple[StoredRollout, str]]:
        """A page of a run's rollouts with their group names, by id."""
        query = (
            select(Rollout, Group.name)
            .join(Run, Run.id == Rollout.run_id)
            .join(Group, Group.id == Rollout.group_id)
            .where(Run.name == run, Rollout.id > after)
            .order_by(Rollout.id)
            .limit(limit)
        )
        async with self.sessions() as session:
            return [(record_of(StoredRollout, row[0]), row[1]) for row in (await session.execute(query)).all()]

    async def rollouts(self, where: RolloutFilter, after: int, limit: int) -> list[tuple[StoredRollout, str, str, str]]:
        """Rollouts with their run, task and group names, by id."""
        query = (
            select(Rollout, Run.name, Task.name, Group.name)
            .join(Run, Run.id == Rollout.run_id)
            .join(Task, Task.id == Rollout.task_id)
            .join(Group, Group.id == Rollout.group_id)
            .where(Rollout.id > after)
            .order_by(Rollout.id)
            .limit(limit)
        )
        query = _equal(
            query,
            (Run.name, where.run),
            (Task.name, where.task),
            (Rollout.group_id, where.group_id),
            (Rollout.status, where.status),
            (Rollout.meta["harness"].as_string(), where.harness),
        )
        if where.reward_min is not None:
            query = query.where(Rollout.reward >= where.reward_min)
        if where.reward_max is not None:
            query = query.where(Rollout.reward <= where.reward_max)
        if where.policy_version is not None:
            # EXISTS probes the (rollout_id, policy_version, ...) index of migration 0005 per rollout.
            query = query.where(
                exists().where(Call.rollout_id == Rollout.id, Call.policy_version == where.policy_version)
            )
        async with self.sessions() as session:
            rows = (await session.execute(query)).all()
        return [(record_of(StoredRollout, row[0]), *row[1:]) for row in rows]

    async def calls(self, where: CallFilter, after: int, limit: int, tokens: bool = False) -> list[StoredCall]:
        """Calls by id, without bodies; their token arrays (whole prompts) only with ``tokens``."""
        columns = CALL_COLUMNS + TOKEN_COLUMNS if tokens else CALL_COLUMNS
        query = select(*columns).where(Call.id > after).order_by(Call.id).limit(limit)
        query = _equal(
            query,
            (Call.rollout_id, where.rollout_id),
            (Call.finish_reason, where.finish_reason),
            (Call.dialect, where.dialect),
        )
        run_rollouts = (
            None
            if where.run is None
            else (select(Rollout.id).join(Run, Run.id == Rollout.run_id).where(Run.name == where.run))
        )
        if where.tag is not None:
            # The matching ids first, from the covering index that holds tags on SQLite (migration
            # 0005); filtering the calls' rows instead reads their tags past the token blobs' overflow
            # pages: 0.6 s rather than 25 ms for a first page of 200,000 calls. (No `id > after` in
            # here: SQLite would then pick the rowid-ranged rollout_id index, which is not covering.)
            matching = select(Call.id).where(has_tag(where.tag))
            if run_rollouts is not None:
                matching = matching.where(Call.rollout_id.in_(run_rollouts))
            query = query.where(Call.id.in_(matching))
        elif run_rollouts is not None:
            query = query.where(Call.rollout_id.in_(run_rollouts))
        async with self.sessions() as session:
            rows = list((await session.execute(query)).all())
            if not tokens:
                return [stored_call(row, tokens=False) for row in rows]
            prompts, roles = await prompt_delta.fill_whole(session, rows)
        return [
            stored_call(
                SimpleNamespace(**{**row._asdict(), "prompt_ids": prompts[row.id], "prompt_roles": roles[row.id]})
            )
            for row in rows
        ]


def is_main_call():
    """The call has no tags: the agent's own loop, not a side call (title, summary, ...)."""
    return cast(Call.tags, String) == "[]"


def has_tag(tag: str):
    """``tags`` (a JSON list) holds ``tag``: a match on its JSON text, the same on SQLite and PostgreSQL."""
    needle = json.dumps(tag)  # as SQLAlchemy serialized it, quotes included: "title" never matches "subtitle"
    return cast(Call.tags, String).contains(needle, autoescape=True)


def _equal(query: Select, *pairs) -> Select:
    for column, value in pairs:
        if value is not None:
            query = query.where(column == value)
    return query

"""The store: rollouts (their creation, identity by token, end and rewards) and the call inserts; its
repositories are attributes: ``listings``, ``calls`` (reading calls back), ``adapters``."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from store import request_delta
from store.adapters import Adapters
from store.calls import CallReads, call_row
from store.database import create_engine, create_sessionmaker
from store.evaluation import Evaluations
from store.health import Health
from store.inline_reads import InlineReads
from store.leases import Leases
from store.listings import Listings
from store.live_keys import LiveKeys
from store.mismatch import Mismatches
from store.policies import Policies
from store.policies import run_policy as run_policy_of
from store.records import (
    AgentReport,
    CallRecord,
    RolloutIdentity,
    RolloutsDeleted,
    StoredRollout,
    identity_of,
    record_of,
    storable_text,
)
from store.reports import Reports
from store.request_delta import RecentRequests
from store.retention import Retention
from store.rewards import (
    ENDED,
    RolloutEnded,
    add_reward,
    check_group_open,
    check_rewards,
    end_rollout,
    lock_group,
)
from store.rollout_asks import RUN_AS_IS, UNPINNED, AskedSettings, PolicyPin
from store.rollout_requests import check_same_body, created_by, request_digest
from store.rollout_status import RolloutStatuses
from store.run_settings import ADHOC_RUN, settled_config
from store.scrub import PERSONAL_TABLES, scrub
from store.sqlite_inserts import SQLiteInserts
from store.stored_bytes import StoredBytes, stored_size
from store.summary import Summaries
from store.tables import Call, Group, Rollout, Run, Task
from store.traces import Traces
from store.training import Training

DEFAULT_GROUP = "default"
FRESH_ROLLOUTS_KEPT = 100_000  # rollouts created here and not called yet, remembered as having no calls
TOKEN_PREFIX = "hrl-"  # lets the gateway tell its tokens from placeholder API keys


class Store:
    def __init__(
        self,
        engine: AsyncEngine,
        bind: AsyncConnection | None = None,
        inserts: SQLiteInserts | None = None,
        rollout_budget: int | None = None,
    ):
        """``bind`` runs every session inside one outer connection (tests roll it back);
        ``inserts`` takes the call inserts off aiosqlite (SQLite files, see ``sqlite_inserts``); with it, a
        rollout's status is read on the caller's thread too (``rollout_status``); ``rollout_budget``: the
        bytes one rollout's calls may take (``stored_bytes``; None: no bound)."""
        self.engine = engine
        self._bind = bind
        self._inserts = inserts
        self.sessions: async_sessionmaker[AsyncSession] = create_sessionmaker(bind or engine)
        self.listings = Listings(self.sessions)
        self._tokens: dict[str, RolloutIdentity] = {}
        self._adhoc: RolloutIdentity | None = None
        # A SQLite file's small hot reads on the caller's thread; a read through a connection of the
        # engine's own where none (PostgreSQL), or the sessions when bound to one.
        self._inline = InlineReads(engine.url.database) if inserts is not None else None
        core = None if bind is not None else engine
        self._statuses = RolloutStatuses(self.sessions, core, self._inline)
        # Rollouts created here with no call recorded yet: their first call reads nothing back.
        self._without_calls: set[int] = set()
        self.calls = CallReads(self.sessions, self._without_calls)
        self.stored_bytes = StoredBytes(self.sessions, self._without_calls, rollout_budget)
        self.adapters = Adapters(self.sessions, core, self._inline)
        self.policies = Policies(self.sessions)
        self.leases = Leases(self.sessions)
        self.training = Training(self.sessions)
        self.health = Health(self.sessions, self.calls)
        self.mismatch = Mismatches(self.sessions)
        self.traces = Traces(self.sessions)
        self.retention = Retention(self.sessions)
        self.live_keys = LiveKeys(self.sessions, self.retention, self.scrub)
        self.summary = Summaries(self.sessions)
        self.evaluations = Evaluations(self.sessions)
        self.reports = Reports(self.sessions, engine.dialect.name, self.listings, self.training)
        self._recent_requests = RecentRequests()  # delta bases for the next calls' requests

    @classmethod
    def from_url(cls, url: str, rollout_budget: int | None = None) -> Store:
        inserts = SQLiteInserts(url) if SQLiteInserts.applies_to(url) else None
        return cls(create_engine(url), inserts=inserts, rollout_budget=rollout_budget)

    async def scrub(self) -> None:
        """After a redaction or a deletion: the old rows gone from the database's files too (``store.scrub``)."""
        await scrub(self.engine, PERSONAL_TABLES)

    async def close(self) -> None:
        if self._inline is not None:
            self._inline.close()
        if self._inserts is not None:
            await asyncio.to_thread(self._inserts.close)
        await self.engine.dispose()

    # --- rollout identity -------------------------------------------------------------------

    async def create_rollout(
        self,
        run: str,
        task: str,
        group: str | None = None,
        meta: dict | None = None,
        group_size: int | None = None,
        request_id: str | None = None,
        settings: AskedSettings = RUN_AS_IS,
        pin: PolicyPin = UNPINNED,
    ) -> RolloutIdentity:
        """A new rollout (and its run, task and group when missing).

        ``settings`` (capture, sampling: some of ``SamplingSettings``' fields, the others the run's; policy)
        settle a new run's settings (a run keeps them: RunConflict when asked for others). GroupClosed
        when the group is no longer open or has all of its rollouts.
        With ``request_id`` it is idempotent: the same id in the same run returns the rollout (and
        token) the first request created, RequestConflict when the rest of the request differs.
        ``pin``: the pin as asked (part of the request's digest) and the policy and version it resolved
        to, kept on a new rollout; an unpinned rollout is served its run's policy.
        """
        meta = meta or {}
        capture, sampling, run_policy = settings.capture, settings.sampling, settings.policy
        digest = (
            request_digest(task, group, meta, capture, group_size, sampling, pin.asked, run_policy)
            if request_id
            else None
        )
        async with self.sessions.begin() as session:
            run_row = await _get_or_create(session, Run, name=run)
            config = settled_config(run, run_row.config or {}, capture, sampling, run_policy)
            if config != run_row.config:
                run_row.config = config
            earlier = await created_by(session, run_row, request_id) if request_id else None
            if earlier is not None:  # a retry: its rollout, before a task or group is made for it
                check_same_body(earlier, request_id, digest)
                identity = identity_of(
                    earlier.id, run_row.id, earlier.token, config, earlier.meta or {}, earlier.pinned_version,
                    earlier.policy,
                )  # fmt: skip
                self._tokens[identity.token] = identity
                return identity
            task_row = await _get_or_create(session, Task, run_id=run_row.id, name=task)
            group_row = await _get_or_create(
                session, Group, run_id=run_row.id, task_id=task_row.id, name=group or DEFAULT_GROUP
            )
            await lock_group(session, group_row)
            await check_group_open(session, group_row, group_size)
            if group_size is not None and group_row.size is None:
                group_row.size = group_size
            rollout = Rollout(
                run_id=run_row.id,
                task_id=task_row.id,
                group_id=group_row.id,
                token=TOKEN_PREFIX + secrets.token_urlsafe(24),
                meta=meta,
                request_id=request_id,
                request_digest=digest,
                pinned_version=pin.version,
                policy=pin.policy if pin.version is not None and pin.policy else run_policy_of(config),
            )
            session.add(rollout)
            await session.flush()
            identity = identity_of(rollout.id, run_row.id, rollout.token, config, meta, pin.version, rollout.policy)
        self._tokens[identity.token] = identity
        self._statuses.running(identity.rollout_id)  # as if just read: it runs
        if len(self._without_calls) >= FRESH_ROLLOUTS_KEPT:  # rollouts never called: forgetting costs a query
            self._without_calls.clear()
        self._without_calls.add(identity.rollout_id)
        return identity

    async def identity_for_token(self, token: str) -> RolloutIdentity | None:
        cached = self._tokens.get(token)
        if cached is not None:
            return cached
        query = (
            select(Rollout.id, Rollout.run_id, Rollout.meta, Rollout.pinned_version, Rollout.policy, Run.config)
            .join(Run, Run.id == Rollout.run_id)
            .where(Rollout.token == token)
        )
        async with self.sessions() as session:
            row = (await session.execute(query)).first()
        if row is None:
            return None
        identity = identity_of(
            row.id, row.run_id, token, row.config or {}, row.meta or {}, row.pinned_version, row.policy
        )
        self._tokens[token] = identity
        return identity

    async def rollout_ended(self, rollout_id: int) -> str | None:
        """The status a rollout ended with, or None while it runs (``store.rollout_status``)."""
        return await self._statuses.ended(rollout_id)

    async def adhoc_identity(self) -> RolloutIdentity:
        """The rollout that collects calls made without a token, one per gateway process."""
        if self._adhoc is None:
            started = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
            self._adhoc = await self.create_rollout(
                ADHOC_RUN, "adhoc", group=f"gateway-{started}-{secrets.token_hex(3)}"
            )
            self.stored_bytes.unbounded.add(self._adhoc.rollout_id)  # every untokened caller's: no budget
        return self._adhoc

    # --- calls ------------------------------------------------------------------------------

    async def insert_calls(self, records: Sequence[CallRecord], inline: bool = False) -> list[int]:
        """Insert and commit a batch of calls in one transaction; returns their ids in order.
        ``inline``: on SQLite, try the commit on the calling thread first (``SQLiteInserts.insert``).

        A call's request is stored as a delta against its parent's when the parent's is at hand
        (``request_delta``): the agent resends its history, the store keeps what is new. OverBudget (nothing
        inserted) when some would take their rollout past its byte budget (``stored_bytes``)."""
        rows = [call_row(record, self._stored_request(record)) for record in records]
        sizes = [stored_size(row) for row in rows]
        await self.stored_bytes.take(records, sizes)
        try:
            ids = await self._insert_rows(rows, inline)
        except Exception as exc:  # not inserted: uncounted (a cancelled insert may still commit: counted)
            self.stored_bytes.give_back([(record.rollout_id, size) for record, size in zip(records, sizes)])
            if not isinstance(exc, (IntegrityError, sqlite3.IntegrityError)):
                raise
            deleted = await self._deleted({record.rollout_id for record in records})  # deleted while it ran?
            if deleted:
                raise RolloutsDeleted(deleted) from None
            raise
        for record, call_id in zip(records, ids):
            self._recent_requests.add(record.rollout_id, call_id, record.request)
            self._without_calls.discard(record.rollout_id)
        return ids

    async def _insert_rows(self, rows: list[dict], inline: bool) -> list[int]:
        table = Call.__table__
        if self._inserts is not None and self._bind is None:
            return await self._inserts.insert(table, rows, inline=inline)
        # A Core insert on the session's connection: the ORM's bulk path costs ~1 ms per call.
        statement = insert(table).returning(table.c.id, sort_by_parameter_order=True)
        async with self._transaction() as connection:
            if len(rows) == 1:  # a plain execute; the compiled statement is cached
                return [(await connection.execute(statement, rows[0])).scalar_one()]
            return list((await connection.execute(statement, rows)).scalars())

    async def _deleted(self, rollout_ids: set[int]) -> set[int]:
        """Which of ``rollout_ids`` no longer exist."""
        async with self.sessions() as session:
            found = set((await session.scalars(select(Rollout.id).where(Rollout.id.in_(rollout_ids)))).all())
        return rollout_ids - found

    def _stored_request(self, record: CallRecord) -> dict:
        parent = self._recent_requests.get(record.rollout_id, record.parent_id)
        return request_delta.encode(record.request, record.parent_id, parent)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
        """A Core transaction without an ORM session (the hot write path)."""
        if self._bind is not None:
            async with self._bind.begin_nested():
                yield self._bind
        else:
            async with self.engine.begin() as connection:
                yield connection

    # --- runs and rollouts ------------------------------------------------------------------

    async def get_rollout(self, rollout_id: int) -> tuple[StoredRollout, str, str, str, int] | None:
        """The rollout with its run, task and group names and its number of calls."""
        query = (
            select(Rollout, Run.name, Task.name, Group.name)
            .join(Run, Run.id == Rollout.run_id)
            .join(Task, Task.id == Rollout.task_id)
            .join(Group, Group.id == Rollout.group_id)
            .where(Rollout.id == rollout_id)
        )
        count = select(func.count()).select_from(Call).where(Call.rollout_id == rollout_id)
        async with self.sessions() as session:
            row = (await session.execute(query)).first()
            if row is None:
                return None
            num_calls = (await session.execute(count)).scalar_one()
        return record_of(StoredRollout, row[0]), row[1], row[2], row[3], num_calls

    async def add_reward(self, rollout_id: int, name: str, value: float | None) -> bool:
        """Set one reward component of a running rollout; False when there is no such rollout.

        InvalidReward (nothing stored) when the value is not finite, RolloutEnded once it has ended.
        """
        async with self.sessions.begin() as session:
            rollout = await _locked_rollout(session, rollout_id)
            if rollout is None:
                return False
            await add_reward(session, rollout, name, value)
        return True

    async def end_rollout(
        self,
        rollout_id: int,
        status: str,
        error: str | None = None,
        rewards: dict[str, float | None] | None = None,
        reward_details: dict[str, dict] | None = None,
        agent: AgentReport | None = None,
        engine_s: float | None = None,
    ) -> bool:
        """Record the rollout's final rewards (and how they were reached), what its agent and engine time
        came to, and end it; its group may become ready.

        InvalidReward (nothing stored, the rollout still runs) when a reward is not finite.
        """
        rewards = check_rewards(rewards or {})
        async with self.sessions.begin() as session:
            await _lock_rollout_group(session, rollout_id)
            rollout = await _locked_rollout(session, rollout_id)
            if rollout is None:
                return False
            if rollout.status in ENDED:
                raise RolloutEnded(f"rollout {rollout_id} already ended as {rollout.status!r}")
            for name, value in rewards.items():
                await add_reward(session, rollout, name, value)
            if reward_details:
                rollout.reward_details = {**(rollout.reward_details or {}), **reward_details}
            if agent is not None:
                rollout.agent_exit_code, rollout.agent_log = agent.exit_code, storable_text(agent.log)
            rollout.engine_s = engine_s
            await end_rollout(session, rollout, status, storable_text(error))
        self._statuses.finished(rollout_id, status)  # its token is refused from now on
        return True


async def _lock_rollout_group(session: AsyncSession, rollout_id: int) -> None:
    """Hold the rollout's group before its row: the finishes of one group then take turns on the group.
    (Taking the rollout first, concurrent finishes of one group deadlocked on PostgreSQL, each waiting to
    lock the group row the other held a weaker lock on.)"""
    group_id = select(Rollout.group_id).where(Rollout.id == rollout_id).scalar_subquery()
    await session.execute(update(Group).where(Group.id == group_id).values(size=Group.size))


async def _locked_rollout(session: AsyncSession, rollout_id: int) -> Rollout | None:
    """The rollout's row, held until the transaction ends (no lost update between two rewards, or between
    a finish and a worker's take-over). An UPDATE first, as SQLite has no SELECT ... FOR UPDATE."""
    if session.bind.dialect.name == "sqlite":  # SELECT ... FOR UPDATE is PostgreSQL's (lock_group does the same)
        await session.execute(update(Rollout).where(Rollout.id == rollout_id).values(status=Rollout.status))
    return await session.get(Rollout, rollout_id, with_for_update=True, populate_existing=True)


async def _get_or_create(session: AsyncSession, table: type, **key):
    """Fetch the row with these column values, creating it when missing (safe under races)."""
    query = select(table).filter_by(**key)
    row = (await session.scalars(query)).first()
    if row is not None:
        return row
    try:
        async with session.begin_nested():
            row = table(**key)
            session.add(row)
            await session.flush()
        return row
    except IntegrityError:  # created concurrently by another request
        return (await session.scalars(query)).one()

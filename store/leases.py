"""Work leases: which rollout worker runs each (round, task, index) of a run, so that several
`harnessrl run` processes (on several hosts) share one run.

A slot is claimed with a lease that lasts ``lease_s`` on the gateway's clock and is renewed while its
rollout runs. Only open slots and slots whose lease expired can be claimed: on PostgreSQL the claim is
one ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)``, so concurrent claims take
different rows without waiting for each other; on SQLite the same UPDATE takes the database's one
write lock, so claims are serialised. Taking over an expired slot cancels, in the same transaction,
the rollout its previous holder left running (its place in the group is free for the replacement),
and a slot whose rollout already ended (finished or failed: the holder died before marking it done,
or the run predates leases) is marked done instead of being handed out. Renewing, and marking a slot
done or open again, only works for the worker holding the lease: a worker never ends what another runs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.records import SCORED, LeaseStatus, RolloutStatus
from store.round_slots import RoundSlots
from store.tables import Group, Rollout, RolloutLease, Run, Task, utcnow

TAKEN_OVER = "interrupted: its worker's lease expired before it ended; another worker replaces it"


@dataclass(frozen=True)
class Lease:
    id: int
    task: str
    slot: int
    attempts: int  # 1 on the first claim; more when it was taken over from a worker that stopped renewing
    expires_at: float  # seconds since the epoch (the gateway's clock)


@dataclass(frozen=True)
class Claim:
    leases: tuple[Lease, ...]
    remaining: int  # slots of the asked tasks not done yet (claimed by anyone, or open), these included
    taken_over: tuple[int, ...] = ()  # rollouts cancelled because their lease had expired


@dataclass(frozen=True)
class SlotEnd:
    lease_id: int
    done: bool  # True: its rollout ended (``rollout_id``); False: handed back unplayed (open again)
    rollout_id: int | None = None


class Leases:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock=time.time):
        self.sessions, self.clock = sessions, clock

    async def claim(
        self, slots: RoundSlots, worker: str, limit: int, lease_s: float, holding: Sequence[int] = ()
    ) -> Claim:
        """Up to ``limit`` open or expired ``slots``, held by ``worker`` for ``lease_s`` seconds.
        ``holding``: the leases the worker is playing (expired or not, never handed to it again)."""
        now = self.clock()
        async with self.sessions.begin() as session:
            await _add_missing(session, slots)
            claimable = (
                select(RolloutLease.id)
                .where(
                    *_of(slots),
                    RolloutLease.status != LeaseStatus.DONE,
                    or_(RolloutLease.status == LeaseStatus.OPEN, RolloutLease.expires_at < now),
                    RolloutLease.id.not_in(list(holding)),
                )
                # the round's order: its rows were added task by task in the order the runner gave them
                .order_by(RolloutLease.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            claimed = (
                await session.execute(
                    update(RolloutLease)
                    .where(RolloutLease.id.in_(claimable.scalar_subquery()))
                    .values(
                        status=LeaseStatus.CLAIMED,
                        worker=worker,
                        expires_at=now + lease_s,
                        attempts=RolloutLease.attempts + 1,
                    )
                    .returning(
                        RolloutLease.id,
                        RolloutLease.task,
                        RolloutLease.slot,
                        RolloutLease.attempts,
                        RolloutLease.expires_at,
                    )
                    .execution_options(synchronize_session=False)
                )
            ).all()
            leases = [Lease(*row) for row in claimed]
            settled, taken_over = await _settle_earlier(session, slots, leases)
            remaining = (
                await session.execute(select(func.count()).where(*_of(slots), RolloutLease.status != LeaseStatus.DONE))
            ).scalar_one()
        kept = tuple(sorted((lease for lease in leases if lease.id not in settled), key=lambda x: x.id))
        return Claim(kept, remaining, taken_over)

    async def renew(self, worker: str, lease_ids: Sequence[int], lease_s: float) -> tuple[set[int], set[int]]:
        """(renewed, lost): leases ``worker`` still holds get ``lease_s`` more; the others were taken over."""
        if not lease_ids:
            return set(), set()
        async with self.sessions.begin() as session:
            renewed = set(
                (
                    await session.execute(
                        update(RolloutLease)
                        .where(*_held(worker, lease_ids))
                        .values(expires_at=self.clock() + lease_s)
                        .returning(RolloutLease.id)
                        .execution_options(synchronize_session=False)
                    )
                ).scalars()
            )
        return renewed, set(lease_ids) - renewed

    async def release(self, worker: str, ends: Sequence[SlotEnd]) -> set[int]:
        """Mark slots ``worker`` holds done (with their rollout) or open again; the ids it no longer held."""
        lost = set()
        async with self.sessions.begin() as session:
            for end in ends:
                values = (
                    {"status": LeaseStatus.DONE, "rollout_id": end.rollout_id}
                    if end.done
                    else {"status": LeaseStatus.OPEN, "worker": None, "expires_at": 0.0}
                )
                result = await session.execute(
                    update(RolloutLease)
                    .where(*_held(worker, [end.lease_id]))
                    .values(**values)
                    .execution_options(synchronize_session=False)
                )
                if result.rowcount == 0:
                    lost.add(end.lease_id)
        return lost

    async def slots(self, run: str, round_: int) -> list[RolloutLease]:
        """Every lease row of a run's round (reports and tests)."""
        async with self.sessions() as session:
            rows = await session.scalars(
                select(RolloutLease)
                .where(RolloutLease.run == run, RolloutLease.round == round_)
                .order_by(RolloutLease.task, RolloutLease.slot)
            )
            return list(rows)


def _of(slots: RoundSlots) -> tuple:
    return (
        RolloutLease.run == slots.run,
        RolloutLease.round == slots.round,
        RolloutLease.task.in_(list(slots.tasks)),
        RolloutLease.slot < slots.group_size,
    )


def _held(worker: str, lease_ids: Sequence[int]) -> tuple:
    return (
        RolloutLease.id.in_(list(lease_ids)),
        RolloutLease.worker == worker,
        RolloutLease.status == LeaseStatus.CLAIMED,
    )


async def _add_missing(session: AsyncSession, slots: RoundSlots) -> None:
    """Rows for slots that have none yet (first claim of a run's round, or tasks added since)."""
    have = (await session.execute(select(func.count()).where(*_of(slots)))).scalar_one()
    if have >= len(set(slots.tasks)) * slots.group_size:
        return
    rows = [
        {
            "run": slots.run,
            "round": slots.round,
            "task": task,
            "slot": slot,
            "status": LeaseStatus.OPEN,
            "expires_at": 0.0,
            "attempts": 0,
        }
        for task in dict.fromkeys(slots.tasks)
        for slot in range(slots.group_size)
    ]
    dialect = postgresql if session.bind.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(RolloutLease).on_conflict_do_nothing(index_elements=["run", "round", "task", "slot"])
    for start in range(0, len(rows), 500):
        await session.execute(statement, rows[start : start + 500])


async def _settle_earlier(
    session: AsyncSession, slots: RoundSlots, leases: Sequence[Lease]
) -> tuple[set[int], tuple[int, ...]]:
    """Claimed slots that already have an ended rollout become done; rollouts still running on a claimed
    slot (their worker's lease expired) are cancelled. (lease ids now done, rollout ids cancelled)."""
    if not leases:
        return set(), ()
    by_slot = {(lease.task, lease.slot): lease for lease in leases}
    found = await session.execute(
        select(Rollout, Task.name)
        .join(Task, Task.id == Rollout.task_id)
        .join(Group, Group.id == Rollout.group_id)
        .join(Run, Run.id == Rollout.run_id)
        .where(Run.name == slots.run, Group.name == slots.group, Task.name.in_({lease.task for lease in leases}))
        .order_by(Rollout.id)
    )
    done, running = {}, []  # lease id -> the rollout that ended its slot; (rollout id, lease id) still running
    for rollout, task in found.all():
        meta = rollout.meta or {}
        lease = by_slot.get((task, meta.get("index")))
        if lease is None or meta.get("round", 0) != slots.round:
            continue
        if rollout.status in SCORED:  # it ended (a cancelled one is replaced)
            done[lease.id] = rollout.id
        elif rollout.status == RolloutStatus.RUNNING:
            running.append((rollout.id, lease.id))
    cancelled, settled = await _cancel(session, dict(running))
    done.update(settled)
    for lease_id, rollout_id in done.items():
        await session.execute(
            update(RolloutLease)
            .where(RolloutLease.id == lease_id)
            .values(status=LeaseStatus.DONE, rollout_id=rollout_id)
            .execution_options(synchronize_session=False)
        )
    return set(done), tuple(cancelled)


async def _cancel(session: AsyncSession, running: dict[int, int]) -> tuple[tuple[int, ...], dict[int, int]]:
    """Cancel the rollouts (rollout id -> its lease id) still running; (cancelled, {lease id: rollout id} of
    those that ended meanwhile: their slots are done). Only the rollouts' rows are locked (id order), never
    their groups: a cancelled rollout leaves its group's place free, so the group cannot become ready by
    it, and a finish (its rollout, then its group) can then never wait in a cycle with a take-over."""
    if not running:
        return (), {}
    rows = (
        await session.scalars(
            select(Rollout)
            .where(Rollout.id.in_(list(running)))
            .order_by(Rollout.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    ).all()
    settled = {running[r.id]: r.id for r in rows if r.status in SCORED}  # a finish landed first
    still = [r for r in rows if r.status == RolloutStatus.RUNNING]
    for rollout in still:
        rollout.status, rollout.error, rollout.finished_at = RolloutStatus.CANCELLED, TAKEN_OVER, utcnow()
    await session.flush()
    return tuple(r.id for r in still), settled


__all__ = ["TAKEN_OVER", "Claim", "Lease", "Leases", "RoundSlots", "SlotEnd"]

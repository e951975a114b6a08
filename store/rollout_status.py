"""Whether a rollout still runs, as a model call asks before it is served: answered from memory or one read.

Ends through this store are known at once. An end another process wrote (a second gateway on the same
database) is found by reading the rollout's row again once the last read is ``RUNNING_RECHECK_S`` old,
so a call is refused at most that long after its rollout ended anywhere.

At an agent's pace (each call waits seconds on the engine) nearly every call finds its rollout's
last read that old and reads again. Through an async ORM session that read cost about as much CPU as
the rest of the call: 2.9-3.3 ms a call with it, 1.5-1.7 without (tests/benchmarks/gateway_floor.py
``--agent-pace-s 1.2``, 64 agents). So on a SQLite file the row is read on the caller's thread
(``store.inline_reads``: a primary-key lookup, microseconds), as ``store.sqlite_inserts`` commits a
lone call; a database found busy is read through a Core connection instead, which is also the path on
PostgreSQL. There a read costs a round trip and about 0.9 ms of CPU, so one read covers this rollout
and every other active one due a read (``_sweep``): at an agent's pace about one query a second
serves all of a gateway's agents, and the rollouts it covers wait for it rather than reading again.
A re-read alone, CPU: 1.0 ms through the ORM session, 3 µs inline; a check at an agent's pace on
PostgreSQL (64 rollouts, each checked once a round) 920-936 µs read one by one, 20-23 µs swept.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store.database import core_rows
from store.inline_reads import InlineReads, is_busy
from store.records import RolloutStatus
from store.tables import Rollout

RUNNING_RECHECK_S = 1.0  # how long a rollout read as running is trusted to run
STATUS_SQL = "SELECT status FROM rollouts WHERE id = ?"
ACTIVE_S = 60.0  # a rollout read as running this recently is read again with the others (``_sweep``)
SWEPT_AT_MOST = 1_000  # rollouts one read covers


class RolloutStatuses:
    """Each rollout's status as far as this process knows it (``ended``), read again when it may be stale."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine | None,
        inline: InlineReads | None,
    ):
        """``engine``: where a read takes a Core connection of its own; None: through ``sessions`` (a store
        bound to one outer connection, as tests bind it)."""
        self._sessions, self._engine, self._inline = sessions, engine, inline
        self._ended: dict[int, str] = {}  # rollout id -> the status it ended with (ended stays ended)
        self._running_seen: dict[int, float] = {}  # rollout id -> when it was last read as running
        self._reading: dict[int, asyncio.Future[None]] = {}  # rollout id -> the read in flight that covers it

    def running(self, rollout_id: int) -> None:
        """A rollout known to run (just created here): as if just read."""
        self._running_seen[rollout_id] = time.monotonic()

    def finished(self, rollout_id: int, status: str) -> None:
        """A rollout ended through this store: its token is refused from now on."""
        self._ended[rollout_id] = status

    async def ended(self, rollout_id: int) -> str | None:
        """The status a rollout ended with, or None while it runs."""
        ended = self._ended.get(rollout_id)
        if ended is not None:
            return ended
        seen = self._running_seen.get(rollout_id)
        if seen is not None and time.monotonic() - seen < RUNNING_RECHECK_S:
            return None
        if self._inline is not None:
            try:
                row = self._inline.rows(STATUS_SQL, (rollout_id,))
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
            else:
                return self._settled(rollout_id, row[0][0] if row else None)
        await asyncio.shield(self._reading.get(rollout_id) or self._sweep(rollout_id))
        return self._ended.get(rollout_id)

    def _sweep(self, rollout_id: int) -> asyncio.Future[None]:
        """One read of this rollout's status and of every other active one due a read: at an agent's
        pace each rollout's calls find their answer stale, and one query a second serves them all.
        Every rollout it covers waits for it rather than reading again."""
        now = time.monotonic()
        for idle in [r for r, seen in self._running_seen.items() if now - seen >= ACTIVE_S]:
            del self._running_seen[idle]  # not called for a while: its next call reads it alone
        due = (
            r
            for r, seen in self._running_seen.items()
            if now - seen >= RUNNING_RECHECK_S and r != rollout_id and r not in self._reading
        )
        ids = [rollout_id, *due][:SWEPT_AT_MOST]
        reading = asyncio.ensure_future(self._read(ids))
        for rid in ids:
            self._reading[rid] = reading
        reading.add_done_callback(lambda _: [self._reading.pop(rid, None) for rid in ids])
        return reading

    async def _read(self, ids: list[int]) -> None:
        query = select(Rollout.id, Rollout.status).where(Rollout.id.in_(ids))
        found = {row[0]: row[1] for row in await core_rows(self._engine, self._sessions, query)}
        for rollout_id in ids:
            self._settled(rollout_id, found.get(rollout_id))

    def _settled(self, rollout_id: int, status: str | None) -> str | None:
        """What a read found, remembered: an end for good, running until it may be stale again."""
        if status is not None and status != RolloutStatus.RUNNING:
            self._ended[rollout_id] = status
            self._running_seen.pop(rollout_id, None)
            return status
        self._running_seen[rollout_id] = time.monotonic()
        return None

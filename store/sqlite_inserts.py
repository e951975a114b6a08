"""The hot write path on SQLite: call batches inserted on one plain sqlite3 connection in one thread.

aiosqlite runs every statement (begin, insert, commit) as its own hop to its worker thread, about
1.3 ms for a one-call transaction on the 2-core machine; the same transaction on a synchronous
connection, handed to a dedicated thread once, takes about 0.45 ms. The gateway commits each call
before answering, so this is most of what recording adds to a call's latency. Reads and the other
writes stay on the async engine; SQLite's WAL and busy timeout arbitrate between the two.

The INSERT is compiled by SQLAlchemy once per table and set of columns, and its values go through
each column type's own bind processor, so rows are stored exactly as a Core insert stores them; only
SQLAlchemy's per-execution work (statement cache key, execution context, result) is skipped, about
half the CPU of a one-call insert.

The WAL is checkpointed off the commit path. SQLite's own auto-checkpoint runs inside the commit that
takes the WAL past 1,000 pages: about every 140th one-call commit took 3-7 ms longer, which was most
of the gateway's p99 and a tenth of its mean latency one agent at a time. The insert connection has it
off; every ``CHECKPOINT_EVERY_ROWS`` rows a PASSIVE checkpoint (it never blocks the writer) runs on a
thread and connection of its own, and runs again while as many rows came in during the last one (a
slow checkpoint on a busy machine leaves nothing behind for want of later rows). The other
connections keep SQLite's default, which now rarely finds a WAL that large.

A commit may also run on the caller's thread (``inline``; the writer asks for it when a call is the
gateway's only one in flight): the hop to the insert thread and back costs more than the insert, about
0.13 ms of a call's ~1 ms one agent at a time. It never waits there: the event loop could be what the
holder of the write lock needs to finish, so a busy database sends the insert to the thread after all.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import Engine, Table, event, insert
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url

from store.database import sqlite_pragmas
from store.json_text import json_text

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY_ROWS = 128  # about SQLite's auto-checkpoint size (1,000 pages) in one-call commits


@dataclass(frozen=True)
class _Prepared:
    sql: str  # INSERT ... RETURNING id, positional parameters
    columns: tuple[str, ...]  # the row keys, in parameter order
    processors: tuple[Callable | None, ...]  # each column type's bind processor (None: passed as is)


class SQLiteInserts:
    def __init__(self, url: str):
        """``url``: the store's ``sqlite+aiosqlite:///PATH`` URL (a file database)."""
        sync_url = make_url(url).set(drivername="sqlite+pysqlite")
        # Used by one thread at a time, either the insert thread or (inline) the caller's.
        self.engine: Engine = create_sync_engine(
            sync_url, connect_args={"check_same_thread": False}, json_serializer=json_text
        )
        event.listen(self.engine, "connect", sqlite_pragmas)
        # One thread: the connection stays warm and batches commit in the order they were handed over.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-inserts")
        self._connection = None  # the insert thread's DBAPI connection
        # The caller's thread's (``inline``): it never waits for another's write lock (busy_timeout 0, set
        # once, not around every insert: those two statements cost a fifth of a one-call insert).
        self._inline_connection = None
        self._handed_over = 0  # inserts on (or on their way to) the insert thread
        self._prepared: dict[tuple, _Prepared] = {}
        # Checkpoints: their own thread and connection; one at a time (counted in the insert thread).
        self._checkpoint_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-checkpoint")
        self._checkpoint_connection = None
        self._checkpointing: Future | None = None  # the running checkpoints, done when they have caught up
        self._rows_since_checkpoint = 0
        self._checkpoint_running = False
        self._checkpoint_lock = threading.Lock()  # the count is kept by the insert and checkpoint threads

    @staticmethod
    def applies_to(url: str) -> bool:
        parsed = make_url(url)
        return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")

    async def insert(self, table: Table, rows: Sequence[dict], inline: bool = False) -> list[int]:
        """Insert ``rows`` (every row the same keys) into ``table`` in one committed transaction; their ids.
        ``inline``: on this thread when the insert thread is idle and no other connection holds the
        write lock; otherwise (and by default) on the insert thread."""
        if inline and not self._handed_over:
            ids = self._insert_without_waiting(table, rows)
            if ids is not None:
                return ids
        self._handed_over += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, self._insert, table, rows)
        finally:
            self._handed_over -= 1

    def _insert_without_waiting(self, table: Table, rows: Sequence[dict]) -> list[int] | None:
        """``_insert`` on the inline connection, or None (nothing written) when another connection holds
        the write lock."""
        if self._inline_connection is None:
            self._inline_connection = self._new_connection()
            self._inline_connection.execute("PRAGMA busy_timeout=0")
        try:
            return self._insert(table, rows, self._inline_connection)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY:
                raise
            return None

    def _insert(self, table: Table, rows: Sequence[dict], connection=None) -> list[int]:
        prepared = self._prepare(table, tuple(rows[0]))
        connection = connection or self._insert_connection()
        cursor = connection.cursor()
        try:
            ids = [cursor.execute(prepared.sql, _values(prepared, row)).fetchone()[0] for row in rows]
            connection.commit()
        except BaseException:
            connection.rollback()
            raise
        finally:
            cursor.close()
        self._count_for_checkpoint(len(rows))
        return ids

    def _insert_connection(self):
        if self._connection is None:
            self._connection = self._new_connection()
        return self._connection

    def _new_connection(self):
        connection = self.engine.raw_connection()
        connection.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run beside, not in, commits
        return connection

    def _count_for_checkpoint(self, rows: int) -> None:
        with self._checkpoint_lock:
            self._rows_since_checkpoint += rows
            if self._rows_since_checkpoint < CHECKPOINT_EVERY_ROWS or self._checkpoint_running:
                return
            self._rows_since_checkpoint, self._checkpoint_running = 0, True
            self._checkpointing = self._checkpoint_thread.submit(self._checkpoints)

    def _checkpoints(self) -> None:
        """Checkpoint until fewer than ``CHECKPOINT_EVERY_ROWS`` rows came in meanwhile: rows committed
        during a slow checkpoint (a busy machine) are not left in the WAL until more rows arrive."""
        while True:
            self._checkpoint()
            with self._checkpoint_lock:
                if self._rows_since_checkpoint < CHECKPOINT_EVERY_ROWS:
                    self._checkpoint_running = False
                    return
                self._rows_since_checkpoint = 0

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the database (PASSIVE: what readers still use stays)."""
        try:
            if self._checkpoint_connection is None:
                self._checkpoint_connection = self.engine.raw_connection()
            self._checkpoint_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception:  # a missed checkpoint is made up by the next; the calls are committed
            logger.exception("WAL checkpoint failed")

    def _prepare(self, table: Table, columns: tuple[str, ...]) -> _Prepared:
        key = (table.name, columns)
        if key not in self._prepared:
            missing = [c.name for c in table.columns if c.default is not None and c.name not in columns]
            if missing:  # a Core insert would fill these from Python-side defaults; this path does not
                raise ValueError(f"rows for {table.name} must carry {missing} (this path applies no defaults)")
            dialect = self.engine.dialect
            compiled = insert(table).returning(table.c.id).compile(dialect=dialect, column_keys=list(columns))
            order = tuple(compiled.positiontup)
            self._prepared[key] = _Prepared(
                str(compiled),
                order,
                tuple(table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in order),
            )
        return self._prepared[key]

    def close(self) -> None:
        if self._inline_connection is not None:
            self._inline_connection.close()
            self._inline_connection = None
        self._thread.submit(self._close_connection).result()
        self._thread.shutdown(wait=True)
        self._checkpoint_thread.submit(self._close_checkpoint_connection).result()
        self._checkpoint_thread.shutdown(wait=True)
        self.engine.dispose()

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _close_checkpoint_connection(self) -> None:
        if self._checkpoint_connection is not None:
            self._checkpoint_connection.close()
            self._checkpoint_connection = None


def _values(prepared: _Prepared, row: dict) -> list:
    if len(row) != len(prepared.columns):  # a key the first row lacks would be dropped without a word
        raise ValueError(f"every row of one insert must carry the same columns: {sorted(row)}")
    return [
        value if process is None else process(value)
        for value, process in zip((row[name] for name in prepared.columns), prepared.processors)
    ]

"""Small reads of a SQLite file on the caller's thread: microseconds where an async session costs a millisecond.

An async SQLAlchemy read costs about 1 ms of CPU (the ORM session, aiosqlite's hop to its thread and
back), and up to ten times that when it runs alone every half second on an idle gateway (cold caches).
The reads the gateway makes again and again, whether a rollout still runs (``store.rollout_status``)
and which policy versions the store holds (``store.adapters``, the policy follower's poll), are a few
rows by an index: on a plain sqlite3 connection they take microseconds, so they run inline.

The connection is read-only (``query_only``), opens the file read-write only if it exists (it never
creates an empty database) and never waits for a lock (``busy_timeout`` 0): in WAL mode a reader does
not wait for the writer, and one that finds the database busy anyway (a WAL being recovered) raises
``sqlite3.OperationalError``, which ``is_busy`` tells apart from real faults, so the caller reads
through its async engine instead.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """The database was locked (read again elsewhere); any other error is a fault to raise."""
    return getattr(exc, "sqlite_errorcode", None) in BUSY


class InlineReads:
    """Read-only queries on a SQLite file from the caller's thread, never waiting for a lock."""

    def __init__(self, path: str):
        """``path``: the SQLite file (the store's engine URL's database)."""
        self._path = path
        self._connection: sqlite3.Connection | None = None

    def rows(self, sql: str, parameters: tuple = ()) -> list[tuple]:
        """The rows of one query; ``sqlite3.OperationalError`` when busy (``is_busy``) or broken."""
        return self.connection().execute(sql, parameters).fetchall()

    def connection(self) -> sqlite3.Connection:
        if self._connection is None:
            uri = f"{Path(self._path).resolve().as_uri()}?mode=rw"  # never creates a file that is not there
            self._connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            self._connection.execute("PRAGMA busy_timeout=0")
            self._connection.execute("PRAGMA query_only=ON")
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

"""The hot write path on SQLite: call batches inserted on one plain sqlite3 connection in one thread.

aiosqlite runs every statement (begin, insert, commit) as its own hop to its worker thread, about
1.3 ms for a one-call transaction on the 2-core machine; the same transaction on a synchronous
connection, handed to a dedicated thread once, takes about 0.45 ms. The gateway commits each call
before answering, so this is most of what recording adds to a call's latency. Reads and the other
writes stay on the async engine; SQLite's WAL and busy timeout arbitrate between the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, Insert, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url

from gateway.store.database import sqlite_pragmas


class SQLiteInserts:
    def __init__(self, url: str):
        """``url``: the store's ``sqlite+aiosqlite:///PATH`` URL (a file database)."""
        sync_url = make_url(url).set(drivername="sqlite+pysqlite")
        self.engine: Engine = create_sync_engine(sync_url)
        event.listen(self.engine, "connect", sqlite_pragmas)
        # One thread: the connection stays warm and batches commit in the order they were handed over.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-inserts")

    @staticmethod
    def applies_to(url: str) -> bool:
        parsed = make_url(url)
        return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")

    async def insert(self, statement: Insert, rows: Sequence[dict]) -> list[int]:
        """Run ``statement`` (an INSERT ... RETURNING id) for ``rows`` in one committed transaction."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._insert, statement, rows)

    def _insert(self, statement: Insert, rows: Sequence[dict]) -> list[int]:
        with self.engine.begin() as connection:
            if len(rows) == 1:
                return [connection.execute(statement, rows[0]).scalar_one()]
            return list(connection.execute(statement, rows).scalars())

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        self.engine.dispose()

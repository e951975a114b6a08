"""Connecting to the store: SQLite (WAL) by default, PostgreSQL via asyncpg."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Executable, Row, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from store.json_text import json_text


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


# the async driver the store uses for each backend a URL may name without one
ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}
ACCEPTED = "use sqlite:///PATH or postgresql://USER@HOST/DB (their async drivers, aiosqlite and asyncpg, are added)"


def with_async_driver(url: str) -> str:
    """``url`` with the store's async driver when it names none (``sqlite:///x.db``, ``postgresql://...``,
    as people write them); a ValueError naming the accepted forms for a driver the store cannot use."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's ArgumentError and friends: one message
        raise ValueError(f"{url!r} is no database URL ({exc}); {ACCEPTED}") from None
    if parsed.drivername in ASYNC_DRIVERS:
        return parsed.set(drivername=ASYNC_DRIVERS[parsed.drivername]).render_as_string(hide_password=False)
    if parsed.drivername not in ASYNC_DRIVERS.values():
        raise ValueError(f"the store cannot use the driver {parsed.drivername!r} of {url!r}; {ACCEPTED}")
    return url


async def core_rows(
    engine: AsyncEngine | None, sessions: async_sessionmaker[AsyncSession], query: Executable
) -> Sequence[Row]:
    """A read's rows through a Core connection of ``engine``'s own (no ORM session to set up and close:
    the polled reads, ``store.inline_reads``' fallback and PostgreSQL's path), or through ``sessions``
    when None (a store bound to one outer connection, as tests bind it)."""
    if engine is None:
        async with sessions() as session:
            return (await session.execute(query)).all()
    async with engine.connect() as connection:
        return (await connection.execute(query)).all()


BUSY_TIMEOUT_MS = 10_000  # how long a SQLite connection waits for another's write lock


def sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers (REST, learner) run beside the writer; synchronous=NORMAL in WAL mode
    # survives a killed process (only an OS crash can lose the last commits).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA secure_delete=ON")  # deleted and redacted content is zeroed, not left in free pages
    cursor.close()


def prepare_sqlite_file(url: str) -> None:
    """A SQLite file database's folder, and the file itself when new, created readable by its owner
    only (0600): it holds every prompt and the rollout tokens. SQLite creates the -wal and -shm files
    with the main file's permissions, so they are private too. Other databases: nothing to do."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # an empty file is an empty database
    except FileExistsError:
        pass  # one that exists keeps the permissions its owner gave it


def create_engine(url: str) -> AsyncEngine:
    url = with_async_driver(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        prepare_sqlite_file(url)
        engine = create_async_engine(url, json_serializer=json_text)
        event.listen(engine.sync_engine, "connect", sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True, json_serializer=json_text)


def create_sessionmaker(bind: AsyncEngine | AsyncConnection) -> async_sessionmaker[AsyncSession]:
    # On a connection (tests), each session's commit becomes a savepoint of the outer transaction.
    if isinstance(bind, AsyncConnection):
        return async_sessionmaker(bind, expire_on_commit=False, join_transaction_mode="create_savepoint")
    return async_sessionmaker(bind, expire_on_commit=False)

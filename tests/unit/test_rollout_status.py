"""A rollout's status as a call asks it: read inline on a SQLite file, through a connection when busy."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from store import inline_reads, rollout_status
from store.database import create_engine
from store.store import Store


def counting_async_statements(store: Store) -> list[str]:
    """The SQL statements ``store`` sends through its async engine, as they are sent."""
    statements: list[str] = []
    event.listen(store.engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    return statements


def busy(*_args) -> list:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = sqlite3.SQLITE_BUSY
    raise exc


async def test_a_sqlite_store_reads_a_status_inline_and_sees_an_end_another_process_wrote(
    file_store, sqlite_db, monkeypatch
):
    monkeypatch.setattr(rollout_status, "RUNNING_RECHECK_S", 0.0)  # every call reads again
    identity = await file_store.create_rollout("run-s", "task-1")
    statements = counting_async_statements(file_store)
    assert await file_store.rollout_ended(identity.rollout_id) is None
    other = Store.from_url(sqlite_db)
    try:
        await other.end_rollout(identity.rollout_id, "failed", None)
    finally:
        await other.close()
    assert await file_store.rollout_ended(identity.rollout_id) == "failed"
    assert not [s for s in statements if "rollouts" in s]  # neither read took the async path


async def test_a_busy_database_reads_the_status_through_a_connection_instead(file_store, sqlite_db, monkeypatch):
    monkeypatch.setattr(rollout_status, "RUNNING_RECHECK_S", 0.0)
    identity = await file_store.create_rollout("run-b", "task-1")
    await file_store.end_rollout(identity.rollout_id, "cancelled", None)
    fresh = Store.from_url(sqlite_db)  # knows nothing of the end: it must read it
    try:
        monkeypatch.setattr(inline_reads.InlineReads, "rows", busy)
        statements = counting_async_statements(fresh)
        assert await fresh.rollout_ended(identity.rollout_id) == "cancelled"
        assert [s for s in statements if "FROM rollouts" in s]
    finally:
        await fresh.close()


async def test_an_inline_read_that_fails_for_another_reason_raises(file_store, monkeypatch):
    monkeypatch.setattr(rollout_status, "RUNNING_RECHECK_S", 0.0)
    identity = await file_store.create_rollout("run-c", "task-1")

    def broken(*_args) -> list:
        raise sqlite3.OperationalError("no such table: rollouts")

    monkeypatch.setattr(inline_reads.InlineReads, "rows", broken)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await file_store.rollout_ended(identity.rollout_id)


async def test_the_inline_connection_cannot_write(sqlite_db):
    reads = inline_reads.InlineReads(make_url(sqlite_db).database)
    try:
        assert reads.rows(rollout_status.STATUS_SQL, (10**9,)) == []  # no such rollout
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            reads.connection().execute("DELETE FROM rollouts")
    finally:
        reads.close()


def test_the_inline_reader_never_creates_a_database_that_is_not_there(tmp_path):
    reads = inline_reads.InlineReads(str(tmp_path / "gone.db"))
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        reads.rows(rollout_status.STATUS_SQL, (1,))
    assert not (tmp_path / "gone.db").exists()


async def test_one_read_serves_every_active_rollout_due_one(sqlite_db):
    """At an agent's pace each rollout's answer goes stale between its calls: one query reads them all."""
    store = Store(create_engine(sqlite_db))  # no inline reads: the path a PostgreSQL store takes
    statements = counting_async_statements(store)
    try:
        ids = [(await store.create_rollout("run-p", f"task-{i}")).rollout_id for i in range(3)]
        age_reads(store, 5.0)  # every answer past RUNNING_RECHECK_S
        before = len(statements)
        assert [await store.rollout_ended(rollout_id) for rollout_id in ids] == [None] * 3
        assert sum("FROM rollouts" in s for s in statements[before:]) == 1
        await store.end_rollout(ids[2], "finished", None)
        store._statuses._ended.clear()  # as if another gateway had ended it
        age_reads(store, 5.0)
        before = len(statements)
        assert await store.rollout_ended(ids[0]) is None
        assert await store.rollout_ended(ids[2]) == "finished"  # read with ids[0]'s
        assert sum("FROM rollouts" in s for s in statements[before:]) == 1
        age_reads(store, rollout_status.ACTIVE_S + 1)  # idle a minute: read alone when called again
        assert await store.rollout_ended(ids[1]) is None
        assert list(store._statuses._running_seen) == [ids[1]]
    finally:
        await store.close()


def age_reads(store: Store, seconds: float) -> None:
    """Every status this store read, read ``seconds`` earlier."""
    seen = store._statuses._running_seen
    for rollout_id in seen:
        seen[rollout_id] -= seconds

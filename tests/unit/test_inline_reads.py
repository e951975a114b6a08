"""The store's polled reads on a SQLite file: inline on the caller's thread, through a connection when busy.

The rollout status's own cases are in test_rollout_status.py; here the policy follower's poll
(``Adapters.loaded_versions``) and what it spares an idle gateway.
"""

from __future__ import annotations

import asyncio
import sqlite3
from types import SimpleNamespace

import pytest
from sqlalchemy import event

from gateway.policy.follower import follow_once
from gateway.policy.policy_set import PolicySet
from store import inline_reads
from store.database import create_engine
from store.store import Store


def adapter_statements(store: Store) -> list[str]:
    """The SQL statements on ``adapters`` that ``store`` sends through its async engine."""
    statements: list[str] = []

    def seen(_conn, _cursor, statement, *_rest) -> None:
        if "adapters" in statement:
            statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", seen)
    return statements


def busy(*_args) -> list:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = sqlite3.SQLITE_BUSY
    raise exc


def following_state(store: Store) -> SimpleNamespace:
    """The part of a gateway's state a follower poll reads before it finds anything new."""
    return SimpleNamespace(
        policies=PolicySet("policy", "base"), store=store, refused_versions=set(), publish_lock=asyncio.Lock()
    )


async def test_loaded_versions_are_read_inline_and_see_what_another_store_saved(file_store, sqlite_db):
    statements = adapter_statements(file_store)
    assert await file_store.adapters.loaded_versions() == set()
    other = Store.from_url(sqlite_db)  # another gateway's store on the same file
    try:
        await other.adapters.save("policy", 1, "policy-v1", "/adapters/v1", loaded=True)
        await other.adapters.save("coder", 3, "coder-v3", "/adapters/c3", loaded=True)
        await other.adapters.save("policy", 2, "policy-v2", "/adapters/v2", loaded=False)
    finally:
        await other.close()
    assert await file_store.adapters.loaded_versions() == {("policy", 1, "policy-v1"), ("coder", 3, "coder-v3")}
    assert statements == []  # neither read took the async path


async def test_a_busy_database_reads_the_loaded_versions_through_a_connection(file_store, monkeypatch):
    await file_store.adapters.save("policy", 1, "policy-v1", "/adapters/v1", loaded=True)
    monkeypatch.setattr(inline_reads.InlineReads, "rows", busy)
    statements = adapter_statements(file_store)
    assert await file_store.adapters.loaded_versions() == {("policy", 1, "policy-v1")}
    assert len(statements) == 1


async def test_an_inline_read_of_the_versions_that_fails_otherwise_raises(file_store, monkeypatch):
    def broken(*_args) -> list:
        raise sqlite3.OperationalError("no such table: adapters")

    monkeypatch.setattr(inline_reads.InlineReads, "rows", broken)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await file_store.adapters.loaded_versions()


async def test_a_store_without_inline_reads_reads_the_same_versions(sqlite_db):
    store = Store(create_engine(sqlite_db))  # the path a PostgreSQL store takes
    try:
        await store.adapters.save("policy", 4, "policy-v4", "/adapters/v4", loaded=True)
        assert await store.adapters.loaded_versions() == {("policy", 4, "policy-v4")}
    finally:
        await store.close()


async def test_a_follower_poll_with_nothing_new_reads_no_adapter_records(file_store):
    await file_store.adapters.save("policy", 1, "policy-v1", "/adapters/v1", loaded=True)
    await file_store.adapters.save("policy", 2, "policy-v2", "/adapters/v2", loaded=True)
    state = following_state(file_store)
    state.policies.get("policy").publish(2, "policy-v2")  # this gateway already serves v2
    state.refused_versions.add("policy-v1")
    statements = adapter_statements(file_store)
    for _ in range(3):
        assert await follow_once(state) == ()
    assert statements == []


async def test_a_follower_poll_reads_the_records_once_a_version_is_new_to_it(file_store):
    await file_store.adapters.save("coder", 1, "coder-v1", "/adapters/c1", loaded=True)
    state = following_state(file_store)
    state.refused_versions.add("coder-v1")  # refused here: not new, whatever the store says
    statements = adapter_statements(file_store)
    assert await follow_once(state) == ()
    await file_store.adapters.save("coder", 2, "coder-v2", "/adapters/c2", loaded=True)
    state.engine = SimpleNamespace(models=lambda: asyncio.sleep(0, [{"id": "coder-v2"}]))  # already served there
    state.settings = SimpleNamespace(max_staleness=8)
    assert await follow_once(state) == ("coder-v2",)
    assert len([s for s in statements if "FROM adapters" in s]) >= 1  # the records, read for the new one
    assert state.policies.get("coder").current_version == 2

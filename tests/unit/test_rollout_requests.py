"""A create-rollout request refused for reusing a request id leaves nothing behind (a new group made before
the refusal was committed by SQLite's savepoint release, found by the REST fuzzer), also when the request
that took the id commits while the refused one is under way."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import make_url

from store.listings import GroupFilter
from store.rollout_requests import RequestConflict
from store.tables import Group


async def test_a_request_id_sent_again_with_another_body_is_refused_and_adds_no_group(file_store):
    first = await file_store.create_rollout("r", "t", "g1", request_id="x")
    assert (await file_store.create_rollout("r", "t", "g1", request_id="x")).rollout_id == first.rollout_id
    with pytest.raises(RequestConflict, match="another body"):
        await file_store.create_rollout("r", "t", "g2", request_id="x")
    async with file_store.sessions() as session:
        assert (await session.scalars(select(Group.name))).all() == ["g1"]


@contextmanager
def committed_at_the_first_write(store, other: sqlite3.Connection) -> Iterator[None]:
    """``other``'s transaction commits when one of the store's next transactions first writes: where that
    one waits for SQLite's write lock while two requests race."""

    def before(_connection, _cursor, statement: str, *_args) -> None:
        if other.in_transaction and statement.lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE")):
            other.commit()

    event.listen(store.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", before)


async def test_a_request_id_taken_by_a_request_committing_meanwhile_is_refused_and_adds_no_group(file_store):
    taken = await file_store.create_rollout("r", "t", "g1")
    # Another request took the id "x" for another body, and commits while this one is under way.
    other = sqlite3.connect(make_url(str(file_store.engine.url)).database, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE rollouts SET request_id = 'x', request_digest = 'another' WHERE id = ?", (taken.rollout_id,))
    with committed_at_the_first_write(file_store, other), pytest.raises(RequestConflict, match="another body"):
        await file_store.create_rollout("r", "t2", "g2", request_id="x")
    other.close()
    groups = await file_store.listings.groups(GroupFilter(run="r"), 0, 10)
    assert [(task, group.name) for group, _, task in groups] == [("t", "g1")]

"""The store: rollout identity, packed arrays, group commit; each test rolled back."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import event, select

from store.arrays import pack_ids, pack_logprobs, unpack_ids, unpack_logprobs
from store.database import create_engine
from store.records import RolloutsDeleted
from store.run_settings import ADHOC_RUN
from store.store import TOKEN_PREFIX, Store
from store.tables import Call, Group, Run, Task
from store.writer import CallWriter
from tests.builders import call_record, call_row


@pytest.fixture
async def store(sqlite_db: str) -> AsyncIterator[Store]:
    engine = create_engine(sqlite_db)
    async with engine.connect() as connection:
        transaction = await connection.begin()
        yield Store(engine, bind=connection)
        await transaction.rollback()
    await engine.dispose()


def test_arrays_round_trip_as_little_endian_binary():
    ids = [0, 1, 49151, 2**31 - 1]
    assert unpack_ids(pack_ids(ids)) == ids
    assert len(pack_ids(ids)) == 16 and pack_ids([1]) == b"\x01\x00\x00\x00"
    logprobs = [-0.5, -12.25, 0.0]
    assert unpack_logprobs(pack_logprobs(logprobs)) == logprobs


async def test_create_rollout_reuses_run_task_and_group(store):
    first = await store.create_rollout("run-a", "task-1", group="g")
    second = await store.create_rollout("run-a", "task-1", group="g")
    other = await store.create_rollout("run-a", "task-2")
    assert first.run_id == second.run_id == other.run_id
    assert first.token != second.token and first.token.startswith(TOKEN_PREFIX)
    async with store.sessions() as session:
        assert (await session.scalars(select(Run.name))).all() == ["run-a"]
        assert sorted((await session.scalars(select(Task.name))).all()) == ["task-1", "task-2"]
        assert sorted((await session.scalars(select(Group.name))).all()) == ["default", "g"]


async def test_token_lookup_finds_the_rollout_and_rejects_strangers(store, sqlite_db):
    identity = await store.create_rollout("run", "task")
    other_gateway = Store.from_url(sqlite_db)  # has not seen the token: it reads the database
    try:
        assert await other_gateway.identity_for_token(identity.token) == identity
        assert await other_gateway.identity_for_token("hrl-unknown") is None
    finally:
        await other_gateway.close()


async def test_adhoc_calls_share_one_rollout_per_process(store):
    first, second = await store.adhoc_identity(), await store.adhoc_identity()
    assert first == second
    found = await store.get_rollout(first.rollout_id)
    assert found[1] == ADHOC_RUN


async def test_calls_are_listed_in_order_with_cursor_pages(store):
    rollout = await store.create_rollout("run", "task")
    ids = await store.insert_calls([call_record(rollout.rollout_id, output_ids=[i]) for i in range(5)])
    assert ids == sorted(ids)
    page = await store.calls.page(rollout.rollout_id, after=0, limit=3)
    rest = await store.calls.page(rollout.rollout_id, after=page[-1].id, limit=3)
    assert [c.output_ids for c in page + rest] == [[0], [1], [2], [3], [4]]


async def test_writer_batches_concurrent_calls_and_returns_each_id(store):
    rollout = await store.create_rollout("run", "task")
    writer = CallWriter(store)
    writer.start()
    ids = await asyncio.gather(*[writer.record(call_record(rollout.rollout_id, output_ids=[i])) for i in range(50)])
    await writer.stop()
    async with store.sessions() as session:
        rows = {c.id: unpack_ids(c.output_ids) for c in (await session.scalars(select(Call))).all()}
    assert [rows[call_id] for call_id in ids] == [[i] for i in range(50)]


async def test_writer_failure_reaches_every_waiter_and_the_writer_survives(store):
    writer = CallWriter(store)
    writer.start()
    with pytest.raises(Exception):  # noqa: B017 - the FK violation's type is the driver's
        await writer.record(call_record(rollout_id=987654))  # no such rollout: FK violation
    rollout = await store.create_rollout("run", "task")
    assert await writer.record(call_record(rollout.rollout_id)) > 0
    await writer.stop()


async def test_a_deleted_rollouts_call_fails_alone_and_the_rest_of_its_batch_is_committed(store):
    rollout = await store.create_rollout("run", "task")
    writer = CallWriter(store)
    writer.start()
    results = await asyncio.gather(
        *[writer.record(call_record(rollout_id)) for rollout_id in (rollout.rollout_id, 987654, rollout.rollout_id)],
        return_exceptions=True,
    )
    await writer.stop()
    kept, deleted, also_kept = results
    assert isinstance(deleted, RolloutsDeleted) and deleted.rollout_ids == {987654}
    assert isinstance(kept, int) and isinstance(also_kept, int)
    assert writer.write_failure is None  # a deleted rollout is no store failure: /health stays up


async def test_writer_refuses_work_when_not_started(store):
    with pytest.raises(RuntimeError, match="lifespan"):
        await CallWriter(store).record(call_record(1))


async def test_call_batches_on_a_sqlite_file_commit_in_order_and_are_read_back(file_store):
    identity = await file_store.create_rollout("run-i", "task-1")
    records = [call_record(identity.rollout_id, prompt_ids=[n, n + 1], output_ids=[n]) for n in range(5)]
    ids = await file_store.insert_calls(records[:1]) + await file_store.insert_calls(records[1:])
    # the gateway's path on SQLite files: the inserts ran on their own thread
    assert any(t.name.startswith("sqlite-inserts") for t in threading.enumerate())
    assert ids == sorted(ids) and len(set(ids)) == 5
    calls = await file_store.calls.page(identity.rollout_id, 0, 10)  # read on the async engine
    assert [c.id for c in calls] == ids and [c.prompt_ids[0] for c in calls] == list(range(5))


async def test_a_failed_call_batch_raises_and_commits_nothing(file_store):
    identity = await file_store.create_rollout("run-f", "task-1")
    good, orphan = call_record(identity.rollout_id), call_record(10**9)  # no such rollout: a foreign-key error
    with pytest.raises(RolloutsDeleted) as deleted:  # named: the rollout is gone (a forgotten user's)
        await file_store.insert_calls([good, orphan])
    assert deleted.value.rollout_ids == {10**9}
    assert await file_store.calls.page(identity.rollout_id, 0, 10) == []
    assert len(await file_store.insert_calls([good])) == 1  # the writer thread carries on


async def test_the_threaded_sqlite_insert_stores_exactly_what_a_core_insert_stores(file_store, sqlite_db):
    """The threaded path runs SQLAlchemy's compiled INSERT with each column type's bind processor on a
    plain connection: the stored row, byte for byte, is the Core insert's."""
    identity = await file_store.create_rollout("run-x", "task-1")
    record = call_record(
        identity.rollout_id,
        request={"messages": [{"role": "user", "content": "héllo \u2603"}], "n": 2**70, "f": 0.1},
        response={"nested": [None, True, {"a": []}]},
        tags=["summary"],
        temperature=0.7,
    )
    threaded = (await file_store.insert_calls([record]))[0]
    core_engine = create_engine(sqlite_db)
    core = Store(core_engine)  # no threaded inserts: a Core insert on the async engine
    try:
        cored = (await core.insert_calls([record]))[0]
    finally:
        await core.close()
    with sqlite3.connect(sqlite_db.removeprefix("sqlite+aiosqlite:///")) as raw:
        rows = [raw.execute("SELECT * FROM calls WHERE id = ?", (i,)).fetchone() for i in (threaded, cored)]
    columns = [d[0] for d in raw.execute("SELECT * FROM calls").description]
    differing = {c for c, a, b in zip(columns, *rows) if a != b}
    assert differing == {"id", "created_at"}  # the clock moved; the stored form is the same
    stamps = [row[columns.index("created_at")] for row in rows]
    assert len(stamps[0]) == len(stamps[1]) and stamps[0][:10] == stamps[1][:10]  # one format


def test_only_sqlite_files_take_the_threaded_insert_path():
    from store.sqlite_inserts import SQLiteInserts

    assert SQLiteInserts.applies_to("sqlite+aiosqlite:////tmp/x.db")
    assert not SQLiteInserts.applies_to("sqlite+aiosqlite:///:memory:")
    assert not SQLiteInserts.applies_to("postgresql+asyncpg://u@h/db")


def store_counting_statements(url: str) -> tuple[Store, list[str]]:
    """A store on ``url`` and the SQL statements it sends, as they are sent."""
    engine = create_engine(url)
    statements: list[str] = []
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    return Store(engine), statements


async def test_concurrent_calls_of_a_rollout_share_one_status_read(sqlite_db, monkeypatch):
    import store.rollout_status as status_module

    store, statements = store_counting_statements(sqlite_db)
    try:
        identity = await store.create_rollout("run-a", "task-1")
        monkeypatch.setattr(status_module, "RUNNING_RECHECK_S", 0.0)  # every call reads again
        before = len(statements)
        answers = await asyncio.gather(*(store.rollout_ended(identity.rollout_id) for _ in range(16)))
        assert answers == [None] * 16
        assert sum("FROM rollouts" in s for s in statements[before:]) == 1
        await store.end_rollout(identity.rollout_id, "finished", None)
        assert await store.rollout_ended(identity.rollout_id) == "finished"
    finally:
        await store.close()


async def test_a_rollout_created_here_reads_nothing_back_until_its_first_call_is_recorded(sqlite_db):
    store, statements = store_counting_statements(sqlite_db)
    try:
        identity = await store.create_rollout("run-f", "task-1")
        before = len(statements)
        assert await store.rollout_ended(identity.rollout_id) is None  # it runs: just created
        assert await store.calls.graph_nodes(identity.rollout_id, 8) == []
        assert await store.calls.recent_outputs(identity.rollout_id, 8) == []
        assert statements[before:] == []
        answer = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
        [call_id] = await store.insert_calls([call_record(identity.rollout_id, response=answer)])
        assert [node.call_id for node in await store.calls.graph_nodes(identity.rollout_id, 8)] == [call_id]
        assert await store.calls.recent_outputs(identity.rollout_id, 8) == [
            ({"role": "assistant", "content": "hi"}, [4, 5])
        ]
    finally:
        await store.close()


async def test_a_threaded_insert_refuses_rows_of_different_columns_and_commits_none(file_store, sqlite_db):
    from store.sqlite_inserts import SQLiteInserts

    identity = await file_store.create_rollout("run-c", "task-1")
    row = call_row(identity.rollout_id)
    inserts = SQLiteInserts(sqlite_db)
    try:
        assert len(await inserts.insert(Call.__table__, [row])) == 1  # a well-formed row goes in
        with pytest.raises(ValueError, match="same columns"):  # a second row's extra key is not dropped
            await inserts.insert(Call.__table__, [row, {**row, "unknown": 1}])
    finally:
        await asyncio.to_thread(inserts.close)
    assert len(await file_store.calls.page(identity.rollout_id, 0, 10)) == 1  # the refused batch left nothing


async def test_rows_committed_during_a_slow_checkpoint_are_checkpointed_without_waiting_for_more(
    file_store, sqlite_db, monkeypatch
):
    """On a busy machine a checkpoint may still run when the next rows arrive; once it ends it runs
    again for them, not only when yet more rows come."""
    import threading
    from pathlib import Path

    from sqlalchemy.engine import make_url

    from store import sqlite_inserts
    from store.sqlite_inserts import SQLiteInserts

    monkeypatch.setattr(sqlite_inserts, "CHECKPOINT_EVERY_ROWS", 4)
    finish, checkpoints = threading.Event(), []
    checkpoint = SQLiteInserts._checkpoint

    def slow_checkpoint(self) -> None:
        checkpoint(self)
        checkpoints.append(1)
        finish.wait()  # still running while the next rows are committed

    monkeypatch.setattr(SQLiteInserts, "_checkpoint", slow_checkpoint)
    identity = await file_store.create_rollout("run-w", "task-1")
    database = Path(make_url(sqlite_db).database)
    inserts = SQLiteInserts(sqlite_db)
    try:
        for n in range(4):
            await inserts.insert(Call.__table__, [call_row(identity.rollout_id, {"n": n})])
        size_before = database.stat().st_size
        for n in range(8):  # during the first checkpoint
            await inserts.insert(Call.__table__, [call_row(identity.rollout_id, {"text": "x" * 20_000, "n": n})])
        finish.set()
        await asyncio.wrap_future(inserts._checkpointing)
    finally:
        await asyncio.to_thread(inserts.close)
    assert len(checkpoints) == 2
    assert database.stat().st_size > size_before + 100_000  # the later rows' pages left the WAL


async def test_the_wal_is_checkpointed_beside_the_commits_not_inside_them(file_store, sqlite_db, monkeypatch):
    """SQLite's auto-checkpoint made every ~140th commit milliseconds slower; the threaded insert turns
    it off and checkpoints on a thread of its own, so the WAL's pages still reach the database file."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    from store import sqlite_inserts
    from store.sqlite_inserts import SQLiteInserts

    monkeypatch.setattr(sqlite_inserts, "CHECKPOINT_EVERY_ROWS", 4)
    identity = await file_store.create_rollout("run-w", "task-1")
    database = Path(make_url(sqlite_db).database)
    inserts = SQLiteInserts(sqlite_db)
    try:
        await inserts.insert(Call.__table__, [call_row(identity.rollout_id)])
        size_before = database.stat().st_size
        for n in range(12):
            await inserts.insert(Call.__table__, [call_row(identity.rollout_id, {"text": "x" * 20_000, "n": n})])

        def own_checkpoint_setting() -> int:
            return inserts._insert_connection().execute("PRAGMA wal_autocheckpoint").fetchone()[0]

        assert await asyncio.get_running_loop().run_in_executor(inserts._thread, own_checkpoint_setting) == 0
        await asyncio.wrap_future(inserts._checkpointing)
    finally:
        await asyncio.to_thread(inserts.close)
    assert database.stat().st_size > size_before + 100_000  # the rows' pages were copied from the WAL
    assert len(await file_store.calls.page(identity.rollout_id, 0, 20)) == 13

"""One agent at a time, a call is committed on the event loop's thread; never by waiting there for a lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import httpx
from sqlalchemy.engine import make_url

from gateway.app import create_app
from harnessrl.server import BackgroundServer
from store.sqlite_inserts import SQLiteInserts
from store.tables import Call
from store.writer import CallWriter
from tests.builders import ADMIN_HEADERS, call_record, call_row, chat_body, gateway_settings
from tests.fake_tokens import FakeReply
from tests.waiting import until


async def insert_on_thread(inserts: SQLiteInserts, row: dict, inline: bool) -> str:
    """The name of the thread the insert of ``row`` ran on."""
    ran_on = []
    insert = inserts._insert

    def spied(*args):
        ran_on.append(threading.current_thread().name)
        return insert(*args)

    inserts._insert = spied
    await inserts.insert(Call.__table__, [row], inline=inline)
    return ran_on[0]


async def test_an_inline_insert_commits_on_the_calling_thread_and_a_plain_one_on_the_insert_thread(
    file_store, sqlite_db
):
    identity = await file_store.create_rollout("run-i", "task-1")
    inserts = SQLiteInserts(sqlite_db)
    try:
        here = threading.current_thread().name
        assert await insert_on_thread(inserts, call_row(identity.rollout_id), inline=True) == here
        assert (await insert_on_thread(inserts, call_row(identity.rollout_id), inline=False)).startswith(
            "sqlite-inserts"
        )
    finally:
        await asyncio.to_thread(inserts.close)
    assert len(await file_store.calls.page(identity.rollout_id, 0, 10)) == 2


async def test_an_inline_insert_never_holds_the_event_loop_waiting_for_another_connections_lock(file_store, sqlite_db):
    """The lock's holder may need the event loop to commit (an async session between its statements):
    an inline insert that waited there for it would wait out the busy timeout and fail."""
    identity = await file_store.create_rollout("run-l", "task-1")
    holder = sqlite3.connect(make_url(sqlite_db).database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    inserts = SQLiteInserts(sqlite_db)
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        insert = asyncio.create_task(inserts.insert(Call.__table__, [call_row(identity.rollout_id)], inline=True))
        # The loop keeps ticking while the insert waits; held for the busy timeout, it would tick once or
        # twice and only after the insert failed. Ticks, not seconds: a busy machine ticks slowly.
        await until(lambda: ticks >= 10 or insert.done(), "the loop to tick while the insert waits")
        assert not insert.done()  # the insert waits for the lock on its thread
        holder.execute("COMMIT")
        assert len(await insert) == 1
    finally:
        ticker.cancel()
        holder.close()
        await asyncio.to_thread(inserts.close)
    assert len(await file_store.calls.page(identity.rollout_id, 0, 10)) == 1


class SpyStore:
    """What the writer asks of a store: each insert's ``inline``; ``hold`` keeps one batch committing."""

    def __init__(self):
        self.inline: list[bool] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def insert_calls(self, records, inline: bool = False) -> list[int]:
        self.inline.append(inline)
        await self.hold.wait()
        return list(range(len(self.inline), len(self.inline) + len(records)))


async def test_a_call_recorded_alone_is_committed_at_once_only_while_the_writer_is_idle():
    store = SpyStore()
    writer = CallWriter(store)
    writer.start()
    await writer.record(call_record(1), alone=True)
    await writer.record(call_record(1))  # another call was in flight: queued, batched
    store.hold.clear()
    batch = asyncio.create_task(writer.record(call_record(1)))
    await until(lambda: len(store.inline) == 3, "that batch committing")
    alone = asyncio.create_task(writer.record(call_record(1), alone=True))
    # queued behind the batch, or (wrongly) committing at once: either way it has been decided
    await until(lambda: writer._queue.qsize() == 1 or len(store.inline) == 4, "the alone call to be taken")
    store.hold.set()
    await asyncio.gather(batch, alone)
    await writer.stop()
    assert store.inline == [True, False, False, False]  # the last waited in the queue for the batch


async def test_the_pipeline_records_alone_only_when_no_other_call_is_in_flight(
    sqlite_db, fake_engine, fake_engine_server, monkeypatch
):
    seen = []
    record = CallWriter.record

    async def spied(writer, call, alone=False):
        seen.append(alone)
        return await record(writer, call, alone=alone)

    monkeypatch.setattr(CallWriter, "record", spied)
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    with BackgroundServer(create_app(settings)) as server:  # a real socket: the stream is read as it comes
        async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS, timeout=10) as http:
            await http.post("/v1/chat/completions", json=chat_body("alone"))
            fake_engine.token_delay_s = 0.05
            fake_engine.script = [FakeReply(content="a long streamed answer"), FakeReply(content="short")]
            async with http.stream("POST", "/v1/chat/completions", json=chat_body("streamed", stream=True)) as stream:
                lines = stream.aiter_lines()
                await anext(lines)  # the stream is under way: its call is in flight
                await http.post("/v1/chat/completions", json=chat_body("beside"))
                async for _ in lines:
                    pass
    assert seen == [True, False, True]  # alone; beside the stream; the stream, once the other was done

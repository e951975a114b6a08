"""The store failing for a while: locked by another process, a full disk. Every request it fails is a 503
with Retry-After in its route's shape (a stream ends with its dialect's error event), /health says the
gateway is degraded until a write succeeds again, and the database file is readable by its owner only."""

from __future__ import annotations

import errno
import logging
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gateway.errors import store_failure
from migrations.runner import upgrade
from store import database
from store.store import Store
from tests.builders import chat_body, gateway_settings, messages_body
from tests.gateway_harness import start_gateway
from tests.unit.test_errors import assert_openai_error


@pytest.fixture
async def impatient_gateway(sqlite_db, fake_engine, fake_engine_server, monkeypatch):
    """A gateway whose SQLite connections wait 0.2 s (not 10 s) for another process's write lock."""
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", 200)
    async for harness in start_gateway(gateway_settings(sqlite_db, fake_engine_server.url), fake_engine):
        yield harness


def database_path(gateway) -> str:
    return make_url(gateway.app.state.gateway.settings.database_url).database


async def test_a_store_locked_by_another_process_is_503_with_retry_after_on_rewards_and_model_calls(
    impatient_gateway,
):
    gateway = impatient_gateway
    rollout = await gateway.new_rollout()
    reward_url = f"/api/rollouts/{rollout['id']}/reward"
    other = sqlite3.connect(database_path(gateway), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        reward = await gateway.http.post(reward_url, json={"name": "judge", "value": 1.0})
        error = assert_openai_error(reward, 503)
        assert error["code"] == "store_unavailable" and "locked by another process" in error["message"]
        assert reward.headers["retry-after"].isdigit()

        chat = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=chat_body())
        assert assert_openai_error(chat, 503)["code"] == "store_unavailable" and "retry-after" in chat.headers
        messages = await gateway.agent.post(f"/r/{rollout['token']}/v1/messages", json=messages_body())
        assert messages.status_code == 503 and "retry-after" in messages.headers
        assert messages.json()["type"] == "error" and messages.json()["error"]["type"] == "overloaded_error"
    finally:
        other.rollback()
        other.close()
    assert (await gateway.http.post(reward_url, json={"name": "judge", "value": 1.0})).status_code == 200


# Another process holding the WAL index's read-mark lock bytes (offsets 123..127 of the -shm file): no
# connection can mark its snapshot, and after about 100 tries (~10 s) SQLite gives up with SQLITE_PROTOCOL.
HOLD_READ_MARKS = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 5, 123)
print("held", flush=True)
sys.stdin.read()
"""


async def test_a_store_whose_wal_index_locks_another_process_holds_is_503_with_retry_after(gateway, caplog):
    rollout = await gateway.new_rollout()
    reward_url = f"/api/rollouts/{rollout['id']}/reward"
    shm = database_path(gateway) + "-shm"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_READ_MARKS, shm], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with caplog.at_level(logging.WARNING):
            reward = await gateway.http.post(reward_url, json={"name": "judge", "value": 1.0})
        assert assert_openai_error(reward, 503)["code"] == "store_unavailable", reward.text
        assert reward.headers["retry-after"].isdigit() and "locking protocol" in caplog.text
    finally:
        holder.communicate("")  # its stdin closed: it exits, and its locks go with it
    assert (await gateway.http.post(reward_url, json={"name": "judge", "value": 1.0})).status_code == 200


def sqlite_error(code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("words that name no lock")  # the code decides, not the words
    error.sqlite_errorcode = code
    return error


# BUSY: a lock held past the busy timeout; LOCKED: a table's lock; PROTOCOL: the WAL index's locks (-shm)
LOCK_CODES = (
    "SQLITE_BUSY SQLITE_BUSY_SNAPSHOT SQLITE_BUSY_RECOVERY SQLITE_LOCKED SQLITE_LOCKED_SHAREDCACHE SQLITE_PROTOCOL"
)


@pytest.mark.parametrize("name", LOCK_CODES.split())
def test_every_sqlite_locking_error_is_a_503_with_retry_after_by_its_code(name):
    error = store_failure(sqlite_error(getattr(sqlite3, name)))
    assert error is not None and error.status_code == 503 and error.headers["Retry-After"].isdigit()


def test_a_sqlite_error_of_another_code_is_no_503_whatever_its_words():
    error = sqlite3.IntegrityError("database is locked")
    error.sqlite_errorcode = sqlite3.SQLITE_CONSTRAINT_UNIQUE
    assert store_failure(error) is None


def disk_full_at_the_writer(gateway, monkeypatch, fault: Exception) -> None:
    async def full(*args, **kwargs):
        raise fault

    monkeypatch.setattr(gateway.app.state.gateway.store, "insert_calls", full)


FAULTS = [sqlite3.OperationalError("database or disk is full"), OSError(errno.ENOSPC, "No space left on device")]


@pytest.mark.parametrize("fault", FAULTS, ids=["sqlite", "oserror"])
async def test_a_stream_that_cannot_be_recorded_ends_with_an_error_event_in_its_dialect(gateway, monkeypatch, fault):
    rollout = await gateway.new_rollout()
    disk_full_at_the_writer(gateway, monkeypatch, fault)
    chat = gateway.openai(f"http://gateway/r/{rollout['token']}/v1")
    with pytest.raises(openai.APIError, match="disk is full"):
        async for _ in await chat.chat.completions.create(**chat_body(), stream=True):
            pass
    responses = await gateway.agent.post(
        f"/r/{rollout['token']}/v1/responses", json={"model": "policy", "input": "Hi", "stream": True}
    )
    assert "event: error" in responses.text and "disk is full" in responses.text
    # The anthropic SDK runs on httpx2: its own in-process client.
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(gateway.app), base_url="http://gateway") as http:
        claude = anthropic.AsyncAnthropic(
            base_url=f"http://gateway/r/{rollout['token']}", api_key="x", http_client=http, max_retries=0
        )
        with pytest.raises(anthropic.APIError, match="disk is full"):
            async with claude.messages.stream(**messages_body()) as stream:
                async for _ in stream:
                    pass


async def test_health_is_degraded_after_a_failed_write_until_a_write_succeeds(gateway, monkeypatch, caplog):
    assert (await gateway.http.get("/health")).status_code == 200
    with monkeypatch.context() as patched, caplog.at_level(logging.CRITICAL):
        disk_full_at_the_writer(gateway, patched, sqlite3.OperationalError("database or disk is full"))
        call = await gateway.agent.post("/v1/chat/completions", json=chat_body())
        assert assert_openai_error(call, 503)["code"] == "store_unavailable" and "retry-after" in call.headers
        health = await gateway.http.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "store_unavailable" and "disk is full" in health.json()["store_error"]
    assert (await gateway.agent.post("/v1/chat/completions", json=chat_body())).status_code == 200
    health = await gateway.http.get("/health")
    assert health.status_code == 200 and health.json()["store"] is True


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_database_and_its_wal_are_readable_by_their_owner_only(tmp_path):
    path = tmp_path / "home" / "harnessrl.db"
    url = database.sqlite_url(path)
    upgrade(url)  # `harnessrl serve` and `harnessrl db upgrade` create it here
    store = Store.from_url(url)
    try:
        async with store.engine.begin() as connection:
            await connection.execute(text("CREATE TABLE probe (x INTEGER)"))
        async with store.engine.connect() as connection:  # open: the -wal and -shm files are there
            await connection.execute(text("SELECT count(*) FROM probe"))
            files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
            assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    finally:
        await store.close()


async def test_an_existing_database_keeps_the_permissions_its_owner_gave_it(tmp_path):
    path = tmp_path / "shared.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    store = Store.from_url(database.sqlite_url(path))
    await store.close()
    assert mode(path) == 0o640

"""Unit-tier fixtures: the gateway in process, in front of the in-process fake engine."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest

from gateway.tito.template import ModelText
from harnessrl.server import BackgroundServer
from store.database import sqlite_url
from store.store import Store
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.gateway_harness import GatewayHarness, start_gateway


@pytest.fixture(scope="session")
def fake_engine_server() -> Iterator[BackgroundServer]:
    """The fake engine on a loopback socket, so the real engine client code is exercised."""
    with BackgroundServer(create_fake_engine_app()) as server:
        yield server


@pytest.fixture
def fake_engine(fake_engine_server) -> FakeEngine:
    fake = FakeEngine(model="fake-base", max_model_len=2048)
    fake_engine_server.app.state.engine = fake
    return fake


@pytest.fixture
async def gateway(sqlite_db: str, fake_engine: FakeEngine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


@pytest.fixture
async def strict_gateway(sqlite_db: str, fake_engine: FakeEngine, fake_engine_server) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, require_token=True)
    async for harness in start_gateway(settings, fake_engine):
        yield harness


@pytest.fixture(scope="session")
def model_text(tiny_model_dir) -> ModelText:
    """The tiny model's tokenizer and chat template, as the tito renderer uses them."""
    return ModelText(tiny_model_dir)


@pytest.fixture
async def tito_gateway(
    sqlite_db, fake_engine: FakeEngine, fake_engine_server, tiny_model_dir, model_text
) -> AsyncIterator[GatewayHarness]:
    """A gateway that can capture in tito mode: the fake engine speaks the tiny model's tokens."""
    fake_engine.encode_text, fake_engine.decode_ids = model_text.encode, model_text.decode
    fake_engine.max_model_len = 100_000
    settings = gateway_settings(sqlite_db, fake_engine_server.url, model_dir=str(tiny_model_dir))
    async for harness in start_gateway(settings, fake_engine):
        yield harness


@pytest.fixture
async def file_store(sqlite_db: str) -> AsyncIterator[Store]:
    """A store on a SQLite file as the gateway opens it (call inserts on their own thread)."""
    store = Store.from_url(sqlite_db)
    yield store
    await store.close()


@pytest.fixture
async def second_store(tmp_path: Path, migrated_sqlite_file: Path) -> AsyncIterator[Store]:
    """A second migrated store on a file of its own: the same data trained another way, for comparison."""
    path = tmp_path / "second.db"
    shutil.copyfile(migrated_sqlite_file, path)
    store = Store.from_url(sqlite_url(path))
    yield store
    await store.close()


@pytest.fixture
async def sdk_http(gateway) -> AsyncIterator[httpx2.AsyncClient]:
    # For tests.anthropic_calls.sdk: the anthropic SDK refuses httpx objects (it runs on httpx2).
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(gateway.app), base_url="http://gateway") as http:
        yield http

"""Unit-tier fixtures: the gateway in process, in front of the in-process fake engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from gateway.app import create_app
from gateway.engine.client import VLLMEngineClient
from gateway.engine.fake import FakeEngine, create_fake_engine_app
from gateway.settings import GatewaySettings
from gateway.tito.template import ModelText
from harnessrl.server import BackgroundServer
from tests.builders import gateway_settings


@dataclass
class GatewayHarness:
    app: FastAPI
    http: httpx.AsyncClient  # talks to the gateway in process, sending the admin key (runner, learner)
    fake: FakeEngine
    agent: httpx.AsyncClient  # the same gateway without the admin key: what a sandboxed agent holds

    def openai(self, base_url: str = "http://gateway/v1", api_key: str = "EMPTY") -> AsyncOpenAI:
        return AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=self.http, max_retries=0)

    async def new_rollout(self, run: str = "test-run", task: str = "task-1", **extra) -> dict:
        response = await self.http.post("/api/rollouts", json={"run": run, "task": task, **extra})
        assert response.status_code == 201, response.text
        return response.json()


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


async def start_gateway(settings: GatewaySettings, fake: FakeEngine) -> AsyncIterator[GatewayHarness]:
    engine = VLLMEngineClient(settings.engine_url)
    app = create_app(settings, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with (httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                      headers={"x-admin-key": settings.admin_key}) as http,
                    httpx.AsyncClient(transport=transport, base_url="http://gateway") as agent):
            yield GatewayHarness(app, http, fake, agent)
    await engine.close()


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
async def tito_gateway(sqlite_db, fake_engine: FakeEngine, fake_engine_server, tiny_model_dir,
                       model_text) -> AsyncIterator[GatewayHarness]:
    """A gateway that can capture in tito mode: the fake engine speaks the tiny model's tokens."""
    fake_engine.encode_text, fake_engine.decode_ids = model_text.encode, model_text.decode
    fake_engine.max_model_len = 100_000
    settings = gateway_settings(sqlite_db, fake_engine_server.url, model_dir=str(tiny_model_dir))
    async for harness in start_gateway(settings, fake_engine):
        yield harness

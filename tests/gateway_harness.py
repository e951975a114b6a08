"""The gateway in process in front of the fake engine, with the two clients tests talk to it through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI
from openai import AsyncOpenAI

from gateway.app import create_app
from gateway.engine.client import VLLMEngineClient
from gateway.settings import GatewaySettings
from gateway.state import GatewayState
from harnessrl.server import BackgroundServer
from tests.builders import gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app


@dataclass
class GatewayHarness:
    app: FastAPI
    http: httpx.AsyncClient  # talks to the gateway in process, sending the admin key (runner, learner)
    fake: FakeEngine
    agent: httpx.AsyncClient  # the same gateway without the admin key: what a sandboxed agent holds

    @property
    def state(self) -> GatewayState:
        return self.app.state.gateway

    def openai(self, base_url: str = "http://gateway/v1", api_key: str = "EMPTY") -> AsyncOpenAI:
        return AsyncOpenAI(base_url=base_url, api_key=api_key, http_client=self.http, max_retries=0)

    async def new_rollout(self, run: str = "test-run", task: str = "task-1", **extra) -> dict:
        response = await self.http.post("/api/rollouts", json={"run": run, "task": task, **extra})
        assert response.status_code == 201, response.text
        return response.json()


async def start_gateway(settings: GatewaySettings, fake: FakeEngine) -> AsyncIterator[GatewayHarness]:
    engine = VLLMEngineClient(settings.engine_url)
    app = create_app(settings, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with (
            httpx.AsyncClient(
                transport=transport, base_url="http://gateway", headers={"x-admin-key": settings.admin_key}
            ) as http,
            httpx.AsyncClient(transport=transport, base_url="http://gateway") as agent,
        ):
            yield GatewayHarness(app, http, fake, agent)
    await engine.close()


@asynccontextmanager
async def gateway_on(database_url: str, stack: AsyncExitStack, **settings) -> AsyncIterator[GatewayHarness]:
    """A gateway in front of a fake engine of its own (served over HTTP), on a shared store."""
    server = stack.enter_context(BackgroundServer(create_fake_engine_app()))
    fake = FakeEngine(model="fake-base", max_model_len=2048)
    server.app.state.engine = fake
    harness = start_gateway(gateway_settings(database_url, server.url, **settings), fake)
    gateway = await anext(harness)
    try:
        yield gateway
    finally:
        await anext(harness, None)  # runs the rest: lifespan shutdown, engine client closed

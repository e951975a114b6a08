"""Several fake engines on loopback sockets behind one in-process gateway (the engine pool's tests)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI

from gateway.app import create_app
from gateway.engine.pool import EnginePool
from harnessrl.server import BackgroundServer
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app


@dataclass
class PoolGateway:
    app: FastAPI
    http: httpx.AsyncClient  # with the admin key (runner, learner)
    agent: httpx.AsyncClient  # without it: what a sandboxed agent holds
    fakes: list[FakeEngine]
    servers: list[BackgroundServer]
    database_url: str

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    @property
    def pool(self) -> EnginePool:
        return self.app.state.gateway.engine

    async def new_rollout(self, task: str = "task-1", **extra) -> dict:
        response = await self.http.post("/api/rollouts", json={"run": "pool-run", "task": task, **extra})
        assert response.status_code == 201, response.text
        return response.json()

    async def chat(self, rollout: dict, content: str = "Hi", headers: dict | None = None, **body) -> httpx.Response:
        return await self.agent.post(
            f"/r/{rollout['token']}/v1/chat/completions",
            headers=headers or {},
            json={"model": "policy", "messages": [{"role": "user", "content": content}], **body},
        )

    def calls(self, rollout_id: int | None = None) -> list[dict]:
        """The recorded calls (id, rollout, engine, queue_ms, moved_from, engine_model), oldest first."""
        path = self.database_url.split("///", 1)[1]
        with sqlite3.connect(path) as db:
            db.row_factory = sqlite3.Row
            where, args = ("WHERE rollout_id = ?", (rollout_id,)) if rollout_id is not None else ("", ())
            rows = db.execute(
                f"SELECT id, rollout_id, engine, queue_ms, moved_from, engine_model FROM calls {where} ORDER BY id",
                args,
            ).fetchall()
        return [dict(row) for row in rows]

    def restart_engine(self, index: int, fake: FakeEngine) -> None:
        """Start engine ``index`` again on its port, as a fresh process (no adapters)."""
        port = self.servers[index].port
        self.fakes[index] = fake
        self.servers[index] = BackgroundServer(create_fake_engine_app(fake), port=port).start()


def fake_engines(count: int, **fields) -> list[FakeEngine]:
    return [FakeEngine(model="fake-base", max_model_len=4096, **fields) for _ in range(count)]


@asynccontextmanager
async def pool_gateway(database_url: str, fakes: list[FakeEngine], **settings) -> AsyncIterator[PoolGateway]:
    """The gateway over one fake engine server per ``fakes``, listed in that order."""
    with ExitStack() as stack:
        servers = [stack.enter_context(BackgroundServer(create_fake_engine_app(fake))) for fake in fakes]
        fields = {"engine_probe_interval_s": 0.05, "follow_interval_s": 0, **settings}
        config = gateway_settings(database_url, servers[0].url, engine_urls=tuple(s.url for s in servers), **fields)
        app = create_app(config)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app)
            async with (
                httpx.AsyncClient(
                    transport=transport, base_url="http://gateway", headers={"x-admin-key": TEST_ADMIN_KEY}
                ) as http,
                httpx.AsyncClient(transport=transport, base_url="http://gateway") as agent,
            ):
                gateway = PoolGateway(app, http, agent, fakes, servers, database_url)
                try:
                    yield gateway
                finally:
                    for server in gateway.servers:  # restarted ones are not in the stack
                        server.stop()

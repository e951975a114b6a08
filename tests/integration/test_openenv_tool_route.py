"""The rollout's tools route (/r/<token>/v1/tools/mcp) on a real gateway, forwarding to real OpenEnv relays
(harnesses/openenv/relay.py) in front of the test environment served for real (tests/openenv_env.py).

What an attacking agent holding its rollout token tries: another rollout's environment, another URL, a
body over the limit, no token, an ended rollout's token, re-pointing its own route."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx
import pytest

from gateway.api.rollout_tools import MAX_TOOL_BODY_BYTES
from harnesses.harness import RolloutTarget
from harnesses.openenv.relay import ToolRelay, registered
from harnesses.openenv.tasks import EnvServer, EnvTaskRef
from harnessrl.server import BackgroundGateway, BackgroundServer
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app

PACKAGE = "tests.openenv_env:AdderEnvironment"


@pytest.fixture
def gateway(sqlite_db) -> Iterator[BackgroundGateway]:
    with (
        BackgroundServer(create_fake_engine_app(FakeEngine(model="fake-base"))) as server,
        BackgroundGateway(gateway_settings(sqlite_db, server.url)) as gw,
    ):
        yield gw


@pytest.fixture(scope="module")
def env_url() -> Iterator[str]:
    """One environment server for the module (each relay holds its own session on it)."""
    with EnvServer(PACKAGE) as url:
        yield url


def new_rollout(gateway: BackgroundGateway, task: str = "t") -> dict:
    body = {"run": "tools", "task": task, "group": task, "group_size": 2}
    answer = http.post(f"{gateway.url}/api/rollouts", json=body, headers=ADMIN_HEADERS)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def rpc(method: str, params: dict | None = None, request_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}


async def call(http: httpx.AsyncClient, url: str, body, **kwargs) -> httpx.Response:
    return await http.post(url, json=body, headers={"accept": "application/json, text/event-stream"}, **kwargs)


@contextlib.asynccontextmanager
async def relayed(rollout: dict, env_url: str, index: int = 0):
    """A relay for the rollout, on an environment reset to task ``index``, registered with the gateway."""
    target = RolloutTarget(rollout["base_url"], rollout["token"])
    async with (
        ToolRelay(env_url, EnvTaskRef(PACKAGE, "adder", "train", index)) as relay,
        registered(target, relay.url, TEST_ADMIN_KEY),
    ):
        yield relay


def tools_url(rollout: dict) -> str:
    return f"{rollout['base_url']}/tools/mcp"


async def test_a_token_reaches_its_own_rollouts_environment_and_no_other(gateway, env_url):
    first, second = new_rollout(gateway, "a"), new_rollout(gateway, "b")
    async with (
        relayed(first, env_url, index=0) as mine,
        relayed(second, env_url, index=1) as theirs,
        httpx.AsyncClient(timeout=60) as http,
    ):
        init = await call(http, tools_url(first), rpc("initialize", {"protocolVersion": "2025-06-18"}))
        assert init.status_code == 200 and init.json()["result"]["capabilities"] == {"tools": {"listChanged": False}}
        assert (
            await call(http, tools_url(first), {"jsonrpc": "2.0", "method": "notifications/initialized"})
        ).status_code == 202
        listed = (await call(http, tools_url(first), rpc("tools/list"))).json()["result"]["tools"]
        assert {t["name"] for t in listed} == {"add", "submit"}
        added = (
            await call(http, tools_url(first), rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}))
        ).json()["result"]
        assert added["content"][0]["text"] == "5" and added["isError"] is False
        # The first rollout's token in the second's path: refused before anything is forwarded.
        crossed = await http.post(
            tools_url(second),
            json=rpc("tools/call", {"name": "submit", "arguments": {"answer": 42}}),
            headers={"authorization": f"Bearer {first['token']}"},
        )
        assert crossed.status_code == 401
        await call(http, tools_url(first), rpc("tools/call", {"name": "submit", "arguments": {"answer": 5}}))
        after = (
            await call(http, tools_url(first), rpc("tools/call", {"name": "submit", "arguments": {"answer": 5}}))
        ).json()["result"]
        assert after["isError"] is True and "episode is over" in after["content"][0]["text"]
        assert (await http.get(tools_url(first))).status_code == 405  # no server-to-client stream
    assert (mine.episode.reward, mine.episode.done, mine.episode.calls) == (1.0, True, 2)
    assert (theirs.episode.reward, theirs.episode.done, theirs.episode.calls) == (None, False, 0)


async def test_the_route_forwards_to_the_registered_url_and_nowhere_else(gateway, env_url):
    rollout = new_rollout(gateway)
    base = rollout["base_url"]
    async with relayed(rollout, env_url), httpx.AsyncClient(timeout=60) as http:
        for path in ("/tools/mcp/../../../admin/policy", "/tools/mcp/x", "/tools/%2e%2e/mcp", "/tools", "/mcp"):
            answer = await call(http, base + path, rpc("tools/list"))
            assert answer.status_code in (401, 404, 405), (path, answer.status_code, answer.text)
            assert "result" not in answer.text
        # A query naming another server changes nothing: the registered relay answers.
        listed = await call(http, f"{tools_url(rollout)}?url={env_url}/mcp", rpc("tools/list"))
        assert {t["name"] for t in listed.json()["result"]["tools"]} == {"add", "submit"}
        # The agent's token cannot re-point its route (the control plane needs the admin key).
        repoint = await http.put(
            f"{gateway.url}/api/rollout-tools",
            json={"token": rollout["token"], "url": env_url},
            headers={"authorization": f"Bearer {rollout['token']}"},
        )
        assert repoint.status_code == 401
        assert (await call(http, tools_url(rollout), rpc("tools/list"))).json()["result"]["tools"]


async def test_no_token_an_unknown_token_or_an_ended_rollout_is_refused(gateway, env_url):
    rollout = new_rollout(gateway)
    async with relayed(rollout, env_url), httpx.AsyncClient(timeout=60) as http:
        assert (await call(http, f"{gateway.url}/v1/tools/mcp", rpc("tools/list"))).status_code in (404, 405)
        assert (await call(http, f"{gateway.url}/r/hrl-forged/v1/tools/mcp", rpc("tools/list"))).status_code == 401
        finished = await http.post(
            f"{gateway.url}/api/rollouts/{rollout['id']}/end",
            json={"status": "finished", "rewards": {}},
            headers=ADMIN_HEADERS,
        )
        assert finished.status_code == 200, finished.text
        ended = await call(http, tools_url(rollout), rpc("tools/call", {"name": "submit", "arguments": {"answer": 5}}))
        assert ended.status_code == 401 and "has ended" in ended.text


async def test_a_rollout_without_tools_has_no_route(gateway):
    rollout = new_rollout(gateway)
    answer = http.post(tools_url(rollout), json=rpc("tools/list"))
    assert answer.status_code == 404 and "no tool server" in answer.text


async def test_bodies_over_the_limit_are_refused(gateway, env_url):
    rollout = new_rollout(gateway)
    huge = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2, "pad": "x" * MAX_TOOL_BODY_BYTES}})
    async with relayed(rollout, env_url) as relay, httpx.AsyncClient(timeout=60) as http:
        declared = await http.post(
            tools_url(rollout), content=json.dumps(huge).encode(), headers={"content-type": "application/json"}
        )
        assert declared.status_code == 413

        async def chunks():
            data = json.dumps(huge).encode()
            for start in range(0, len(data), 65536):
                yield data[start : start + 65536]

        streamed = await http.post(tools_url(rollout), content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413
    assert relay.episode.calls == 0

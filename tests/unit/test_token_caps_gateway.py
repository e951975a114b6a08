"""A rollout token's caps as the agent's SDKs see them, through the whole gateway with no bridge in front
(a sandbox on another machine given ``serve --public-url``): a flooding token gets 429s with Retry-After
while a sibling's calls all succeed, in the dialect the client speaks; a body sent too slowly to a served
gateway gets a 408 and its connection closes; ``serve --public-url`` refuses what sandboxes could not use."""

from __future__ import annotations

import asyncio
import threading

import anthropic
import openai
import pytest
from typer.testing import CliRunner

from harnessrl.server import BackgroundGateway, free_port, uvicorn_server
from tests.builders import gateway_settings
from tests.held_calls import (
    HI,
    anthropic_agent,
    capped_gateway,
    error_json,
    held_streams,
    openai_agent,
    post_head,
    raw_exchange,
)
from tests.waiting import until

CAP = 4


@pytest.fixture
async def flooded(sqlite_db, fake_engine, fake_engine_server):
    """A gateway capped at CAP calls per token, a flooding rollout holding CAP streams open, and a sibling."""
    async with capped_gateway(sqlite_db, fake_engine, fake_engine_server.url, token_max_in_flight=CAP) as gateway:
        flood, sibling = await gateway.new_rollout(task="flood"), await gateway.new_rollout(task="sibling")
        fake_engine.stream_gate = threading.Event()  # every stream stops after its first chunk
        held = await held_streams(openai_agent(gateway, flood["base_url"]), CAP)
        in_flight = gateway.app.state.tokens_in_flight
        await until(lambda: in_flight.get(flood["token"]) == CAP, "the flood's calls in flight")
        yield gateway, flood, sibling, held
        fake_engine.stream_gate.set()
        await asyncio.gather(*held, return_exceptions=True)


async def test_a_flooding_rollout_gets_429s_while_its_siblings_calls_all_succeed(flooded, fake_engine):
    gateway, flood, sibling, held = flooded
    flooding = openai_agent(gateway, flood["base_url"])
    as_api_key = openai_agent(gateway, "http://gateway/v1", api_key=flood["token"])  # no way around it
    refused = []
    for client in (flooding, flooding, as_api_key):
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(model="policy", messages=HI)
        refused.append(caught.value)
    assert {e.response.headers["retry-after"] for e in refused} == {"1"}
    assert {e.body["code"] for e in refused} == {"too_many_in_flight"}

    siblings = openai_agent(gateway, sibling["base_url"])
    answers = await asyncio.gather(
        *(siblings.chat.completions.create(model="policy", messages=HI) for _ in range(CAP))
    )  # at once, while the flood is held
    assert all(a.choices[0].message.content for a in answers)
    assert not any(task.done() for task in held)

    fake_engine.stream_gate.set()
    assert all(await asyncio.gather(*held))  # the flood's own calls were never cut
    assert gateway.app.state.tokens_in_flight == {}
    again = await flooding.chat.completions.create(model="policy", messages=HI)
    assert again.choices[0].message.content
    metrics = (await gateway.http.get("/metrics")).text
    assert 'harnessrl_calls_total{dialect="chat",status="429"} 3.0' in metrics


async def test_an_anthropic_client_over_the_cap_gets_anthropics_error(flooded):
    gateway, flood, _, _ = flooded
    async with anthropic_agent(gateway, flood["base_url"]) as client:
        with pytest.raises(anthropic.RateLimitError) as caught:
            await client.messages.create(model="policy", max_tokens=16, messages=HI)
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("route, anthropic_shape", [("chat/completions", False), ("messages", True)])
def test_a_body_that_stalls_gets_408_from_a_served_gateway_and_its_connection_closes(
    sqlite_db, fake_engine_server, route, anthropic_shape
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, body_read_timeout_s=0.2)
    with BackgroundGateway(settings) as served:
        head = post_head(f"/r/hrl-remote/v1/{route}", declared=1000)
        status, headers, body = raw_exchange(served.url, head, b'{"model": "pol')  # then nothing, ever
    assert (status, headers["connection"]) == (408, "close")  # read to the end: the server closed it
    error = error_json(body)
    assert "body_read_timeout_s" in error["error"]["message"]
    assert (error.get("type") == "error") is anthropic_shape


def serve(tmp_path, monkeypatch, *extra: str):
    import harnessrl.cli.app as cli
    import harnessrl.engine.watchdog as engine_watchdog
    import harnessrl.server as server

    seen = {}
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.setattr(server, "uvicorn_server", lambda settings, *args, **kw: seen.setdefault("settings", settings))
    monkeypatch.setattr(engine_watchdog, "serve_until_stopped", lambda server, engine, console, sockets: 0)
    database = f"sqlite+aiosqlite:///{tmp_path}/db.sqlite"
    args = ["serve", "--engine-url", "http://127.0.0.1:9", "--admin-key", "k", "--database-url", database]
    result = CliRunner().invoke(cli.app, [*args, "--port", str(free_port()), *extra])
    return result, seen.get("settings")


@pytest.mark.parametrize(
    "url, said",
    [
        ("gw.example.org:8443", "http:// or https://"),
        ("ftp://gw.example.org", "http:// or https://"),
        ("https://", "names no host"),
        ("https://agent:secret@gw.example.org", "the only credential"),
        ("https://gw.example.org/?x=1", "query or fragment"),
        ("https://gw.example.org/#top", "query or fragment"),
        ("https://gw.example.org:port", "not a URL"),
        ("https://gw example.org", "spaces"),
        ("http://[::1", "not a URL"),
    ],
)
def test_serve_refuses_a_public_url_sandboxes_could_not_use(tmp_path, monkeypatch, url, said):
    result, settings = serve(tmp_path, monkeypatch, "--public-url", url)
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and settings is None
    assert output.startswith("error: --public-url: ") and said in output


def test_serve_gives_the_public_url_to_the_gateway_and_uvicorn_a_bridges_idle_timeout(tmp_path, monkeypatch):
    result, settings = serve(tmp_path, monkeypatch, "--public-url", "https://GW.example.org:8443/harnessrl")
    assert result.exit_code == 0, result.output
    assert settings.public_url == "https://GW.example.org:8443/harnessrl"
    assert "gw.example.org" in settings.served_hosts()
    server = uvicorn_server(settings, "127.0.0.1", free_port())
    assert server.config.timeout_keep_alive == settings.keep_alive_timeout_s == 120.0


def test_serve_sets_the_per_token_caps_a_load_test_raises(tmp_path, monkeypatch):
    result, settings = serve(tmp_path, monkeypatch, "--token-max-in-flight", "8", "--token-max-connections", "9")
    assert result.exit_code == 0, result.output
    assert (settings.token_max_in_flight, settings.token_max_connections) == (8, 9)
    refused, _ = serve(tmp_path, monkeypatch, "--token-max-in-flight", "0")
    assert refused.exit_code != 0


def test_serve_sets_the_head_size_cap_in_kib_and_defaults_to_64(tmp_path, monkeypatch):
    result, settings = serve(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert settings.max_head_bytes == 64 * 1024
    result, settings = serve(tmp_path, monkeypatch, "--max-head-kib", "8")
    assert result.exit_code == 0, result.output
    assert settings.max_head_bytes == 8 * 1024
    refused, _ = serve(tmp_path, monkeypatch, "--max-head-kib", "0")
    assert refused.exit_code != 0

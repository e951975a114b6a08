"""Engine faults: a restarted engine gets its adapters back, a hung one is cut off after the engine
timeout, and a publication completes in both the store and the engine or changes neither."""

from __future__ import annotations

import httpx
import pytest

from gateway.app import create_app
from harnessrl.server import free_port
from tests.builders import ADMIN_HEADERS, chat_body, gateway_settings
from tests.unit.test_errors import assert_openai_error

CALL_ID = "x-harnessrl-call-id"


async def publish(gateway, version: int, path: str = "/adapters/v1") -> httpx.Response:
    return await gateway.http.post("/admin/adapters", json={"version": version, "path": path})


async def test_engine_that_lost_its_adapters_gets_them_back_and_the_call_succeeds_on_its_version(gateway):
    assert (await publish(gateway, 1, "/adapters/v1")).status_code == 200
    assert (await publish(gateway, 2, "/adapters/v2")).status_code == 200
    gateway.fake.restart()  # the engine restarted: no adapter survives

    response = await gateway.http.post("/v1/chat/completions", json=chat_body())

    assert response.status_code == 200, response.text
    assert gateway.fake.adapters == {"policy-v1": "/adapters/v1", "policy-v2": "/adapters/v2"}
    call = (await gateway.http.get(f"/api/calls/{response.headers[CALL_ID]}")).json()
    assert (call["engine_model"], call["policy_version"]) == ("policy-v2", 2)
    again = await gateway.http.post("/v1/chat/completions", json=chat_body("and again"))
    assert again.status_code == 200  # no further reload needed
    assert [r["model"] for r in gateway.fake.requests] == ["policy-v2", "policy-v2", "policy-v2"]


async def test_adapter_that_cannot_be_reloaded_fails_the_call_after_one_retry(gateway):
    assert (await publish(gateway, 1)).status_code == 200
    gateway.fake.restart()
    gateway.fake.load_error = "adapter folder /adapters/v1 is gone"

    response = await gateway.http.post("/v1/chat/completions", json=chat_body())

    error = assert_openai_error(response, 404)
    assert "policy-v1" in error["message"]
    assert len(gateway.fake.requests) == 2  # the call, and its one retry after the reload attempt


@pytest.mark.parametrize(
    "path, body, anthropic",
    [
        ("/v1/chat/completions", chat_body(), False),
        ("/v1/responses", {"model": "policy", "input": "Hi"}, False),
        ("/v1/messages", {"model": "policy", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}, True),
    ],
)
async def test_hung_engine_gives_a_504_in_the_dialects_shape_after_the_engine_timeout(
    sqlite_db, fake_engine, fake_engine_server, path, body, anthropic
):
    settings = gateway_settings(sqlite_db, fake_engine_server.url, engine_timeout_s=0.5)
    app = create_app(settings)  # the gateway's own engine client, built from the settings
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://gateway", headers=ADMIN_HEADERS
        ) as http:
            fake_engine.delay_s = 3.0  # hung, well past the timeout: an answer at all would be a 200
            response = await http.post(path, json=body)
    assert response.status_code == 504
    if anthropic:
        assert response.json()["type"] == "error" and response.json()["error"]["type"] == "timeout_error"
        assert "--engine-timeout" in response.json()["error"]["message"]
    else:
        error = assert_openai_error(response, 504)
        assert error["code"] == "engine_timeout" and "--engine-timeout" in error["message"]


def test_serve_passes_engine_timeout_to_the_gateway(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import harnessrl.cli.app as cli
    import harnessrl.engine.watchdog as engine_watchdog
    import harnessrl.server as server

    seen = {}
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.setattr(server, "uvicorn_server", lambda settings, *args, **kw: seen.setdefault("settings", settings))
    monkeypatch.setattr(engine_watchdog, "serve_until_stopped", lambda server, engine, console, sockets: 0)
    result = CliRunner().invoke(
        cli.app,
        [
            "serve",
            "--engine-url",
            "http://127.0.0.1:9",
            "--admin-key",
            "k",
            "--database-url",
            f"sqlite+aiosqlite:///{tmp_path}/db.sqlite",
            "--engine-timeout",
            "7.5",
            "--port",
            str(free_port()),
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen["settings"].engine_timeout_s == 7.5


def test_serve_on_a_taken_port_fails_at_once_naming_the_fix_without_starting_an_engine(tmp_path, monkeypatch):
    import socket

    from typer.testing import CliRunner

    import harnessrl.cli.app as cli
    import harnessrl.engine.watchdog as engine_watchdog

    started = []
    monkeypatch.setenv("HARNESSRL_HOME", str(tmp_path))
    monkeypatch.setattr(engine_watchdog, "start_engines", lambda *args, **kw: started.append(args))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = CliRunner().invoke(cli.app, ["serve", "--model", str(tmp_path), "--port", str(port)])
    assert result.exit_code == 1 and f"127.0.0.1:{port}" in result.output and "--port" in result.output
    assert started == []


async def test_publish_with_a_version_beyond_the_store_changes_neither_store_nor_engine(gateway):
    for version in (2**63, 2**31):
        assert_openai_error(await publish(gateway, version), 400)
    assert gateway.fake.adapters == {}
    assert await gateway.app.state.gateway.store.adapters.loaded() == []
    assert (await gateway.http.get("/admin/policy")).json()["current_version"] == 0


async def test_publish_the_engine_refuses_changes_neither_store_nor_engine(gateway):
    gateway.fake.load_error = "no adapter_config.json in /nope"
    response = await publish(gateway, 1, "/nope")
    assert 400 <= response.status_code < 600 and "adapter_config" in response.json()["error"]["message"]
    assert gateway.fake.adapters == {}
    assert await gateway.app.state.gateway.store.adapters.loaded() == []


async def test_publish_whose_store_write_fails_is_unloaded_from_the_engine_again(gateway, monkeypatch):
    store = gateway.app.state.gateway.store

    async def broken_save(*args, **kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(store.adapters, "save", broken_save)
    response = await publish(gateway, 1)
    assert response.status_code == 500
    assert gateway.fake.adapters == {}  # loaded, then unloaded when the store write failed
    assert (await gateway.http.get("/admin/policy")).json()["current_version"] == 0
    monkeypatch.undo()
    assert (await publish(gateway, 1)).status_code == 200  # the same version can be published after all


async def test_an_engines_own_failure_reaches_the_agent_without_its_text_and_its_log_keeps_it(gateway, caplog):
    """vLLM's 5xx text can name internal addresses and paths: the agent reads that the engine failed."""
    internal = "EngineCore at http://10.0.0.7:8001 failed: /opt/vllm/worker.py line 12"
    gateway.fake.failure = (500, internal)
    answer = await gateway.agent.post("/v1/chat/completions", json=chat_body())
    error = assert_openai_error(answer, 502)
    assert error["code"] == "engine_error" and "10.0.0.7" not in answer.text and "/opt/vllm" not in answer.text
    assert internal in caplog.text  # the operator's log has it
    gateway.fake.failure = (400, "This model's maximum context length is 2048 tokens")
    refused = assert_openai_error(await gateway.agent.post("/v1/chat/completions", json=chat_body()), 400)
    assert "maximum context length" in refused["message"]  # the engine's word on the request itself is passed on

"""An engine that does not return the recording fields serves no call, and the refusal names the fix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.app import create_app
from gateway.engine.client import VLLMEngineClient
from gateway.errors import EngineError, EngineUnavailable
from gateway.recording import capture_probe
from gateway.recording.capture_probe import CaptureCheckedEngine, CaptureUnsupported
from tests.builders import ADMIN_HEADERS, chat_body, gateway_settings, messages_body


async def served(settings) -> AsyncIterator[httpx.AsyncClient]:
    engine = VLLMEngineClient(settings.engine_url)
    app = create_app(settings, engine=engine)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://gateway", headers=ADMIN_HEADERS
            ) as http:
                yield http
    finally:
        await engine.close()


@pytest.fixture
async def http_of(sqlite_db, fake_engine, fake_engine_server):
    """The gateway started on the fake engine as the test left it (the probe runs at start)."""
    gateways = []

    async def start() -> httpx.AsyncClient:
        gateways.append(served(gateway_settings(sqlite_db, fake_engine_server.url)))
        return await anext(gateways[-1])

    yield start
    for gateway in gateways:
        await gateway.aclose()


@pytest.mark.parametrize(
    ("omit", "named"),
    [
        ({"prompt_token_ids"}, "no prompt_token_ids (it ignored return_token_ids); the gateway needs vLLM >= 0.10.2"),
        ({"token_ids"}, "no sampled token_ids (it ignored return_token_ids); the gateway needs vLLM >= 0.10.2"),
        ({"logprobs"}, "0 logprobs for 3 sampled tokens; start vLLM without --max-logprobs 0"),
    ],
)
async def test_engine_without_a_recording_field_serves_no_call_naming_the_fix(http_of, fake_engine, omit, named):
    fake_engine.omit = frozenset(omit)
    http = await http_of()
    rollout = (await http.post("/api/rollouts", json={"run": "r", "task": "t"})).json()
    for path, body, read in (
        ("/v1/chat/completions", chat_body(), lambda e: e["error"]["message"]),
        ("/v1/chat/completions", chat_body(stream=True), lambda e: e["error"]["message"]),
        ("/v1/messages", messages_body(), lambda e: e["error"]["message"]),
    ):
        response = await http.post(path, json=body, headers={"authorization": f"Bearer {rollout['token']}"})
        assert response.status_code == 502, response.text
        assert named in read(response.json())
    assert fake_engine.requests == []  # no model call reached the engine
    calls = (await http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert calls == []


async def test_an_engine_fixed_meanwhile_serves_once_probed_again(http_of, fake_engine, monkeypatch):
    fake_engine.omit = frozenset({"token_ids"})
    http = await http_of()
    assert (await http.post("/v1/chat/completions", json=chat_body())).status_code == 502
    fake_engine.omit = frozenset()
    monkeypatch.setattr(capture_probe, "RECHECK_AFTER_FAILURE_S", 0.0)
    response = await http.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]


class FlakyEngine:
    """Answers with every recording field, or not (``complete``); ``down`` calls fail unreachable."""

    def __init__(self):
        self.complete, self.down, self.probes = True, 0, 0

    async def chat(self, body: dict) -> dict:
        if body.get("user") == capture_probe.PROBE_USER:
            self.probes += 1
        if self.down:
            self.down -= 1
            raise EngineUnavailable("engine at test is unreachable")
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "OK"},
            "finish_reason": "length",
            "token_ids": [7] if self.complete else None,
            "logprobs": {"content": [{"logprob": -0.5}]},
        }
        return {"choices": [choice], "prompt_token_ids": [1, 2]}

    async def chat_stream(self, body: dict):
        answer = await self.chat(body)
        return Chunks([{**answer, "choices": [{**answer["choices"][0], "delta": {"content": "OK"}}]}])


class Chunks:
    def __init__(self, chunks: list[dict]):
        self.chunks = chunks

    async def __aiter__(self):
        for chunk in self.chunks:
            yield chunk

    def close(self) -> None:
        pass


async def test_an_engine_that_comes_back_is_probed_again_before_it_serves():
    engine = FlakyEngine()
    checked = CaptureCheckedEngine(engine)
    await checked.chat({"model": "m"})
    assert engine.probes == 2  # plain and streamed
    await checked.chat({"model": "m"})
    assert engine.probes == 2  # passed: not again
    engine.down = 1
    with pytest.raises(EngineUnavailable):
        await checked.chat({"model": "m"})
    engine.complete = False  # it came back as another server, without token ids
    with pytest.raises(CaptureUnsupported, match="no sampled token_ids"):
        await checked.chat({"model": "m"})
    assert engine.probes == 3


class BrokenEngine(FlakyEngine):
    """An engine whose core died: every model call answers ``status``."""

    def __init__(self, status: int, message: str):
        super().__init__()
        self.status, self.message = status, message

    async def chat(self, body: dict) -> dict:
        raise EngineError(self.status, self.message)


async def test_an_engine_that_fails_the_probe_is_named_broken_not_too_old():
    with pytest.raises(CaptureUnsupported) as failed:
        await CaptureCheckedEngine(BrokenEngine(500, "EngineCore encountered an issue")).chat({"model": "m"})
    assert "failed the gateway's capture probe with HTTP 500" in failed.value.message
    assert "see the engine's log" in failed.value.message and "upgrade" not in failed.value.message
    with pytest.raises(CaptureUnsupported, match="refused the gateway's capture probe .*upgrade the engine"):
        await CaptureCheckedEngine(BrokenEngine(400, "unknown field")).chat({"model": "m"})

"""OpenTelemetry export into a real collector: Arize Phoenix (from PyPI, `make phoenix`), started by the
test, receives one trace per ended rollout, a root span and a span per call with the GenAI and harnessrl
attributes, through the gateway's OTLP/HTTP export; the trace is then drawn by Phoenix's own UI in
headless Chromium (a screenshot). The agent side is the official OpenAI SDK over the fake engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from harnessrl.server import BackgroundGateway, BackgroundServer, free_port
from migrations.runner import upgrade
from store.database import sqlite_url
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.fake_tokens import FakeReply
from tests.waiting import wait_until

PHOENIX = Path(__file__).resolve().parents[2] / ".venv-phoenix" / "bin" / "phoenix"
CHROMIUM = shutil.which("chromium")
START_S = 300.0  # Phoenix's first start migrates its own database
UI_MS = 300_000  # guards against a hang, not speed checks: a busy machine draws Phoenix's page slowly
RETRY_MS = 30_000  # how long one click's details may take to show before the span is selected again


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory) -> Iterator[str]:
    """A Phoenix server on loopback, with a working dir of its own; stopped by PID."""
    if not PHOENIX.exists():
        pytest.fail(f"{PHOENIX} is missing: `make phoenix` installs it (`make test` does it first)")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    }
    log = (tmp_path_factory.mktemp("phoenix-log") / "phoenix.log").open("w")
    process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or _healthy(url), "Phoenix to serve", timeout_s=START_S)
        assert process.poll() is None, f"Phoenix exited with {process.returncode}: see {log.name}"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _healthy(url: str) -> bool:
    try:
        return http.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def rollout_spans(phoenix: str, rollout_id: int) -> list[dict]:
    spans = http.get(f"{phoenix}/v1/projects/default/spans", params={"limit": 1000}, timeout=30).json()["data"]
    return [s for s in spans if s["attributes"].get("harnessrl.rollout.id") == rollout_id]


def test_phoenix_receives_a_trace_per_rollout_with_the_genai_spans(phoenix, tmp_path):
    engine = FakeEngine(script=[FakeReply(content="Sunny."), FakeReply(content="You are welcome.")])
    with BackgroundServer(create_fake_engine_app(engine)) as fake:
        settings = gateway_settings(
            sqlite_url(tmp_path / "harnessrl.db"), fake.url, otlp_endpoint=f"{phoenix}/v1/traces"
        )
        upgrade(settings.database_url)
        with BackgroundGateway(settings) as gateway:
            http = httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=30)
            body = {"run": "traced", "task": "weather", "meta": {"harness": "pi"}}
            rollout = http.post("/api/rollouts", json=body).json()
            client = OpenAI(base_url=rollout["base_url"], api_key=rollout["token"], max_retries=0)
            messages = [{"role": "user", "content": "Weather in Paris?"}]
            first = client.chat.completions.create(model="policy", messages=messages)
            messages += [{"role": "assistant", "content": first.choices[0].message.content}]
            client.chat.completions.create(model="policy", messages=[*messages, {"role": "user", "content": "Thanks"}])
            ended = http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"r": 1.0}})
            assert ended.status_code == 200, ended.text
            calls = http.get(f"/api/rollouts/{rollout['id']}/calls").json()["data"]

            spans = wait_until(
                lambda: len(found := rollout_spans(phoenix, rollout["id"])) == 3 and found, "3 spans", timeout_s=START_S
            )
    [root] = [s for s in spans if s["parent_id"] is None]
    children = sorted(
        (s for s in spans if s["parent_id"] is not None), key=lambda s: s["attributes"]["harnessrl.call.id"]
    )
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}
    assert all(s["parent_id"] == root["context"]["span_id"] for s in children)
    assert (root["name"], root["span_kind"]) == ("rollout weather", "AGENT")
    assert root["attributes"]["harnessrl.reward"] == 1.0 and root["attributes"]["gen_ai.agent.name"] == "pi"
    for span, call in zip(children, calls, strict=True):
        attributes = span["attributes"]
        assert (span["name"], span["span_kind"]) == ("chat policy", "LLM")
        assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "policy"
        assert attributes["gen_ai.usage.input_tokens"] == call["num_prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == call["num_output_tokens"]
        assert attributes["harnessrl.call.id"] == call["id"] and attributes["harnessrl.policy.version"] == 0
    assert children[1]["attributes"]["harnessrl.call.parent_id"] == calls[0]["id"]
    screenshot(phoenix, root["context"]["trace_id"], tmp_path / "phoenix-trace.png")


def show_call_attributes(page) -> None:
    """Select a call's span until its details (the GenAI and harnessrl attributes) show. A slow page can
    take the click before the span tree is live, or keep the details hidden while it loads: each try
    selects again and opens the card if collapsed; the whole is bounded by UI_MS, a guard against a hang."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    shown = page.get_by_text("harnessrl.call.id").filter(visible=True).first
    deadline = time.monotonic() + UI_MS / 1000
    while True:
        page.get_by_text("chat policy").filter(visible=True).last.click()
        page.get_by_role("tab", name="Info").click()
        expand_cards_holding(page, "harnessrl.call.id")
        try:
            shown.wait_for(timeout=RETRY_MS)
            return
        except PlaywrightTimeout:
            if time.monotonic() > deadline:
                raise AssertionError(f"Phoenix never showed a call's attributes: {why_hidden(page)}") from None


def expand_cards_holding(page, text: str) -> None:
    """Open the collapsed cards that hold ``text``: a click meant for the span tree can land on the
    details card's header (it carries the span's name too) and collapse it (seen in CI: the attributes
    in a card body of 0x0)."""
    cards = page.locator("section.card", has=page.get_by_text(text))
    for button in cards.locator("button.card__collapsible-button[aria-expanded='false']").all():
        button.click()


def why_hidden(page) -> list[str]:
    """The attribute's elements and their ancestors' layout, to tell why none shows."""
    return [
        match.evaluate(
            """e => { const out = []; for (let x = e; x; x = x.parentElement) { const s = getComputedStyle(x);
            out.push(`${x.tagName}.${x.className} ${s.display}/${s.visibility} ${x.offsetWidth}x${x.offsetHeight}`); }
            return out.slice(0, 12).join(' < '); }"""
        )
        for match in page.get_by_text("harnessrl.call.id").all()
    ]


def screenshot(phoenix: str, trace_id: str, path: Path) -> None:
    """Phoenix's own page of the trace, as a user opens it (loopback only)."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM is not None, "needs a system Chromium (tests/setup_machine.sh installs it)"
    project = http.get(f"{phoenix}/v1/projects", timeout=30).json()["data"][0]["id"]
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(UI_MS)
            page.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url else r.abort())
            page.goto(f"{phoenix}/projects/{project}/traces/{trace_id}")
            page.get_by_text("rollout weather").first.wait_for(timeout=UI_MS)
            show_call_attributes(page)
            page.screenshot(path=str(path), full_page=True)
            print(f"screenshot: {path}")
        finally:
            chromium.close()

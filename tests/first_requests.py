"""The real first request of every harness, kept as fixtures (tests/fixtures/first_requests/NAME.json).

Each fixture is the body the pinned agent binary sent on its first main-loop call (the first call
with tools) of a one-line task, as the gateway stored it, with the gateway's notes on what it did
not serve (``_gateway``, moved to ``notes``). The compatibility record
(tests/unit/test_first_requests.py) replays every fixture through each capture mode, so an agent
release that adds a field or a tool type fails a test instead of a user's run.

Refresh them when a pin moves (needs the agents installed and bubblewrap: tests/setup_machine.sh):

    .venv/bin/python -m tests.first_requests [NAME ...]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "first_requests"
HARNESSES = ("opencode", "pi", "hermes", "claude-code", "codex", "qwen-code")
INSTRUCTION = "Create a file hello.txt containing exactly: hello"  # the one-line task of every fixture
# Where each dialect's requests go (Claude Code adds ?beta=true, which the gateway ignores).
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages?beta=true"}
# Headers the agents send that carry protocol flags (the gateway stores bodies, not headers).
HEADERS = {
    "claude-code": {
        "anthropic-version": "2023-06-01",
        "anthropic-beta": (
            "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
            "mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,"
            "effort-2025-11-24"
        ),
    },
    "codex": {"x-codex-beta-features": "remote_compaction_v2", "accept": "text/event-stream"},
}


def load_first_request(name: str) -> dict:
    """{"harness", "version", "dialect", "path", "headers", "body", "notes"}."""
    return json.loads((FIXTURES / f"{name}.json").read_text())


def all_first_requests() -> list[dict]:
    return [load_first_request(name) for name in HARNESSES]


async def capture(name: str, gateway_url: str) -> dict:
    """Run the agent once through the gateway and return its first main-loop request as a fixture."""
    import httpx

    from harnesses.agents import AGENTS, create
    from harnesses.task import Task
    from tests.builders import ADMIN_HEADERS, run_single_rollout

    task = Task(
        name="hello-file",
        instruction=INSTRUCTION,
        verifier="true",
        agent_timeout_s=300.0,
    )
    harness = create(name, sandbox="local")
    result = await run_single_rollout(harness, gateway_url, f"capture-{name}", task, "local", {"isolation": "bwrap"})
    async with httpx.AsyncClient(base_url=gateway_url, headers=ADMIN_HEADERS, timeout=60) as http:
        calls = (await http.get(f"/api/rollouts/{result.rollout_id}/calls", params={"limit": 100})).json()["data"]
        for call in sorted(calls, key=lambda c: c["id"]):
            detail = (await http.get(f"/api/calls/{call['id']}")).json()
            if detail["request"].get("tools"):
                break
        else:
            raise RuntimeError(f"{name} made no call with tools: {result.error}")
    body = dict(detail["request"])
    notes = body.pop("_gateway", {})
    version = sys.modules[AGENTS[name].__module__].VERSION
    return {
        "harness": name,
        "version": version,
        "dialect": detail["dialect"],
        "path": PATHS[detail["dialect"]],
        "headers": HEADERS.get(name, {}),
        "body": body,
        "notes": notes,
    }


async def _capture_all(names: list[str]) -> None:
    from harnessrl.server import BackgroundGateway, BackgroundServer
    from migrations.runner import upgrade
    from store.database import sqlite_url
    from tests.builders import gateway_settings
    from tests.fake_engine import FakeEngine, FakeReply, create_fake_engine_app

    engine = FakeEngine(model="fake-base", max_model_len=1_000_000, script=lambda body: FakeReply(content="Done."))
    with tempfile.TemporaryDirectory() as folder, BackgroundServer(create_fake_engine_app(engine)) as server:
        database = sqlite_url(Path(folder) / "capture.db")
        upgrade(database)
        with BackgroundGateway(gateway_settings(database, server.url)) as gateway:
            FIXTURES.mkdir(parents=True, exist_ok=True)
            for name in names:
                fixture = await capture(name, gateway.url)
                (FIXTURES / f"{name}.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
                print(
                    f"{name} {fixture['version']}: {len(json.dumps(fixture['body']))} bytes, notes {fixture['notes']}"
                )


if __name__ == "__main__":
    if not shutil.which("bwrap"):
        sys.exit("bubblewrap is needed: tests/setup_machine.sh")
    asyncio.run(_capture_all(sys.argv[1:] or list(HARNESSES)))

"""The one side call the real Claude Code and Codex CLI make in a headless run, forced: context compaction.

A scripted engine drives each agent through its own shell tool until the history passes the agent's
compaction threshold (each command prints 30,000 bytes; the fake engine's tokens are bytes, and the
gateway reports them as usage). The agent then asks for a summary: Claude Code with its main loop's
system prompt and tools, Codex without tools. Once the agent goes on from the summary the engine has
it write the file and answer "Done.". Asserted, in docker and bubblewrap: the compaction call reached
the engine through the gateway, is recorded under the rollout tagged ``summary`` (and nothing else
is tagged), is in no training sample (but in the samples with side calls included), and the rollout
finished with the verifier's reward.

The thresholds, from the pinned binaries: Claude Code compacts at its auto-compact window (at least
100,000) less min(output cap, 20,000) less 13,000 tokens; Codex at 90% of its context window.
"""

from __future__ import annotations

import json

import httpx
import pytest

from harnesses.agents import create
from harnesses.agents.cli_agent import AgentSettings
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from sandboxes import WORKSPACE
from tests.builders import ADMIN_HEADERS, run_single_rollout
from tests.fake_engine import FakeEngine
from tests.fake_tokens import FakeReply, decode, encode

AGENTS = ("claude-code", "codex")
# Claude Code's least window; the history passes its threshold (82,904 with a 4,096 output cap) after
# two commands, and Codex's (90,000) after about eight (it keeps 10,000 bytes of each output).
SETTINGS = AgentSettings(max_tokens=4096, context_length=100_000)
TASK = Task(
    name="compaction",
    instruction="Print the big file until you are told otherwise, then create hello.txt containing: hello",
    verifier='test "$(cat hello.txt)" = hello && grep -qx Done. /logs/agent/final.txt',
    agent_timeout_s=600.0,
    verifier_timeout_s=60.0,
)
BIG = "head -c 30000 /dev/zero | tr '\\0' x"
COMMANDS = {"Bash": {"command": BIG, "description": "Print the big file"}, "exec_command": {"cmd": BIG}}
WRITES = {
    "Write": {"file_path": f"{WORKSPACE}/hello.txt", "content": "hello"},
    "exec_command": {"cmd": f"printf hello > {WORKSPACE}/hello.txt"},
}
# How each agent asks for the summary (the last user message), and how it goes on from it.
ASKS = ("CRITICAL: Respond with TEXT ONLY", "You are performing a CONTEXT CHECKPOINT COMPACTION")
GOES_ON = (
    "This session is being continued from a previous conversation",
    "Another language model started to solve this problem",
)
SUMMARY = "<analysis>A big file was printed.</analysis>\n<summary>Printed the big file; hello.txt is next.</summary>"


def last_user_text(messages: list[dict]) -> str:
    users = [m["content"] for m in messages if m["role"] == "user"]
    content = users[-1] if users else ""
    parts = [content] if isinstance(content, str) else [p.get("text") or "" for p in content if isinstance(p, dict)]
    return "\n".join(parts).lstrip()


def tool_named(body: dict, choices: dict) -> tuple[str, dict]:
    names = {t["function"]["name"] for t in body.get("tools") or []}
    name = next((n for n in choices if n in names), None)
    assert name, f"none of {sorted(choices)} among the tools {sorted(names)}"
    return name, choices[name]


def compaction_script(body: dict) -> FakeReply:
    messages = body["messages"]
    if last_user_text(messages).startswith(ASKS):
        return FakeReply(content=SUMMARY)
    if not body.get("tools"):
        return FakeReply(content="Side")
    if any("hello.txt" in json.dumps(m.get("tool_calls") or []) for m in messages):
        return FakeReply(content="Done.")  # the file is written
    if any(marker in json.dumps(messages) for marker in GOES_ON):
        return FakeReply(tool_calls=(tool_named(body, WRITES),))
    return FakeReply(tool_calls=(tool_named(body, COMMANDS),))


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = compaction_script, []
    fake.encode_text, fake.decode_ids = encode, decode
    return fake


def recorded(gateway: BackgroundGateway, rollout_id: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The rollout's calls (in full), its samples, and its samples with side calls included."""
    with httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        listed = http.get(f"/api/rollouts/{rollout_id}/calls", params={"limit": 1000}).json()["data"]
        calls = [http.get(f"/api/calls/{c['id']}").json() for c in listed]
        samples = http.get(f"/api/rollouts/{rollout_id}/samples").json()["data"]
        with_side = http.get(f"/api/rollouts/{rollout_id}/samples", params={"include_side": "true"}).json()["data"]
    return calls, samples, with_side


def check_compaction(gateway: BackgroundGateway, engine: FakeEngine, result, name: str) -> None:
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    asked = [r for r in engine.requests if last_user_text(r["messages"]).startswith(ASKS)]
    assert asked, "the agent never compacted"
    assert all(bool(r.get("tools")) == (name == "claude-code") for r in asked)  # Claude Code keeps its tools
    calls, samples, with_side = recorded(gateway, result.rollout_id)
    assert len(calls) == len(engine.requests)
    summaries = [c["id"] for c in calls if c["tags"]]
    assert len(summaries) == len(asked) and all(c["tags"] == ["summary"] for c in calls if c["tags"])
    trained = {i for s in samples for i in s["call_ids"]}
    assert trained and not trained & set(summaries)  # the main loop is trained on, the summary is not
    assert set(summaries) <= {i for s in with_side for i in s["call_ids"]}
    assert len(trained) == len(calls) - len(summaries)


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_compaction_in_docker_is_tagged_summary_and_left_out_of_samples(name, gateway, engine):
    harness = create(name, sandbox="docker", settings=SETTINGS)
    result = await run_single_rollout(harness, gateway.url, f"compact-{name}-docker", TASK, "docker", {})
    check_compaction(gateway, engine, result, name)


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_compaction_in_bubblewrap_is_tagged_summary_and_left_out_of_samples(name, gateway, engine):
    harness = create(name, sandbox="local", settings=SETTINGS)
    harness.host_install()  # AgentNotInstalled names the install command
    result = await run_single_rollout(
        harness, gateway.url, f"compact-{name}-local", TASK, "local", {"isolation": "bwrap"}
    )
    check_compaction(gateway, engine, result, name)

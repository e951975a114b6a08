"""--tasks openenv:SPEC: what a spec names, how an environment's task becomes ours, the environment's reward."""

from __future__ import annotations

import pytest

from harnesses.builtin_agent import BuiltinHarness
from harnesses.datasets import load_dataset
from harnesses.harness import AgentOutcome
from harnesses.openenv.agent import OpenEnvToolsHarness, openai_tool, with_environments
from harnesses.openenv.tasks import (
    REWARD_NAME,
    EnvOutcome,
    EnvTaskRef,
    env_task,
    environment_reward,
    spec_kind,
    tool_text,
)
from harnesses.task import Task, TaskError


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("http://127.0.0.1:8000", "url"),
        ("https://env.example/x", "url"),
        ("my_env.server:MyEnvironment", "package"),
        ("ghcr.io/org/echo-env:latest", "image"),
        ("echo-env", "image"),
    ],
)
def test_a_spec_is_a_url_a_package_or_an_image(spec, kind):
    assert spec_kind(spec) == kind


def test_an_environment_task_keeps_where_it_came_from():
    ref = EnvTaskRef("http://127.0.0.1:8000", "echo", "test", 3)
    task = env_task(ref, {"id": "q/3", "prompt": "Say hi."})
    assert task.name == "echo-test-q-3" and task.instruction == "Say hi."
    assert EnvTaskRef.of(task) == ref and EnvTaskRef.of(Task(name="t", instruction="x")) is None
    assert (
        env_task(ref, {"level": 2}).instruction == '{"level": 2}' and env_task(ref, {"level": 2}).name == "echo-test-3"
    )


def test_the_reward_is_the_environments_and_nothing_else():
    assert environment_reward(EnvOutcome("", "", 0, env_reward=0.5)) == 0.5
    assert environment_reward(EnvOutcome("", "", 0)) is None  # the environment gave none: no opinion
    assert environment_reward(AgentOutcome("1.0", "", 0)) is None  # an agent's own text never counts


def test_only_runs_with_environment_tasks_are_wrapped():
    plain = [Task(name="t", instruction="x")]
    harness = BuiltinHarness()
    assert with_environments(plain, harness, ()) == (harness, ())
    wrapped, rewards = with_environments([env_task(EnvTaskRef("http://h:1", "e", "s", 0), "x")], harness, ())
    assert isinstance(wrapped, OpenEnvToolsHarness) and wrapped.name == "builtin"
    assert [r.name for r in rewards] == [REWARD_NAME]


def test_an_unreachable_server_is_an_error_naming_it():
    with pytest.raises(TaskError, match=r"no OpenEnv environment answers at http://127.0.0.1:9/health"):
        load_dataset("openenv:http://127.0.0.1:9")
    with pytest.raises(TaskError, match="names no environment"):
        load_dataset("openenv:")


def test_mcp_tools_become_function_tools_and_results_text():
    from openenv.core.env_server.mcp_types import CallToolObservation, Tool, ToolError, ToolErrorType

    tool = Tool(
        name="add", description="Adds.", input_schema={"type": "object", "properties": {"a": {"type": "integer"}}}
    )
    assert openai_tool(tool) == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
    ok = CallToolObservation(tool_name="add", result={"content": [{"type": "text", "text": "5"}], "data": 5})
    failed = CallToolObservation(
        tool_name="add", result=None, error=ToolError(error_type=ToolErrorType.INVALID_ARGS, message="b is required")
    )
    assert tool_text(ok) == "5" and tool_text(failed) == "error: b is required"


def test_a_cli_agent_on_environment_tasks_is_refused_naming_the_fix():
    class Cli:
        name, side_call_patterns = "opencode", {}

    with pytest.raises(TaskError, match="runs with --harness builtin"):
        with_environments([env_task(EnvTaskRef("http://h:1", "e", "s", 0), "x")], Cli(), ())


def test_an_environment_that_cannot_start_says_why():
    with pytest.raises(TaskError, match="the environment server exited") as caught:
        load_dataset("openenv:no_such_module:Environment")
    assert "cannot load the environment no_such_module:Environment: ModuleNotFoundError" in str(caught.value)
    assert "Traceback" not in str(caught.value)

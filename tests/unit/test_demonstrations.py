"""The solutions teacher plays a task's reference solution as the agent's own shell tool call, then says
it is done; it refuses what it cannot play, naming why."""

from __future__ import annotations

import json

import pytest

from harnesses.agents import AGENTS
from harnesses.agents.cli_agent import ShellTool
from harnesses.builtin_agent import BuiltinHarness
from harnesses.shell_family import shell_tasks
from harnesses.task import Task
from harnessrl.teachers.demonstrations import FINAL, NotPlayable, SolutionTeacher, demonstrator, playable_script
from tests.first_requests import load_first_request

TASKS = shell_tasks(train=1, test=0)
BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}


def body(*messages: dict, tools: list | None = None) -> dict:
    return {"model": "policy", "messages": list(messages), "tools": [BASH] if tools is None else tools}


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


async def test_the_first_call_runs_the_tasks_solution_through_the_agents_shell_tool():
    task = TASKS[3]
    answer = await SolutionTeacher(TASKS, ShellTool("bash")).answer(body(user(task.instruction)))
    [call] = answer["tool_calls"]
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": task.solution}


async def test_after_the_tools_result_it_says_it_is_done_and_side_calls_get_the_same():
    teacher = SolutionTeacher(TASKS, ShellTool("bash"))
    result = {"role": "tool", "tool_call_id": "call_1", "content": ""}
    assert (await teacher.answer(body(user(TASKS[0].instruction), result))) == {"role": "assistant", "content": FINAL}
    titled = await teacher.answer(body(user(TASKS[0].instruction), tools=[]))  # a title call offers no tools
    assert titled["content"] == FINAL and "tool_calls" not in titled


async def test_the_longest_instruction_held_by_the_conversation_picks_the_task():
    short = Task(name="a", instruction="Copy x.", solution="cp x y")
    long = Task(name="b", instruction="Copy x. Then say so.", solution="cp x y && echo ok")
    answer = await SolutionTeacher([short, long], ShellTool("bash")).answer(body(user("Copy x. Then say so.")))
    assert json.loads(answer["tool_calls"][0]["function"]["arguments"])["command"] == long.solution


async def test_a_conversation_about_no_known_task_is_refused_naming_why():
    with pytest.raises(NotPlayable, match="no task's instruction"):
        await SolutionTeacher(TASKS, ShellTool("bash")).answer(body(user("Write me a poem.")))


def test_a_solution_needing_files_beside_solve_sh_is_not_playable():
    task = Task(
        name="t", instruction="i", solution="bash helper.sh", solution_files={"solve.sh": b"", "helper.sh": b""}
    )
    with pytest.raises(NotPlayable, match="helper.sh"):
        playable_script(task)
    with pytest.raises(NotPlayable, match="no reference solution"):
        playable_script(Task(name="t", instruction="i"))


def test_the_solutions_env_is_exported_first():
    task = Task(name="t", instruction="i", solution="echo $GREETING", solution_env={"GREETING": "hi there"})
    assert playable_script(task) == "export GREETING='hi there'\necho $GREETING"


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_cli_agents_shell_tool_is_one_it_really_offers_with_its_required_arguments(name):
    tool = AGENTS[name].shell_tool
    request = load_first_request(name)["body"]
    offered = {(t.get("function") or t).get("name"): t for t in request.get("tools") or []}
    assert tool.name in offered, sorted(offered)
    schema = offered[tool.name].get("function", offered[tool.name])
    schema = schema.get("parameters") or schema.get("input_schema") or {}
    assert set(schema.get("required", [])) <= set(tool.arguments("ls"))


def test_the_builtin_harness_has_no_shell_tool_to_demonstrate_with():
    with pytest.raises(ValueError, match=r"use --harness [\w|-]*\bpi\b"):  # every CLI agent, pi among them
        demonstrator("solutions", TASKS, BuiltinHarness())
    assert demonstrator("openai/gpt-x", TASKS, BuiltinHarness()) is None

"""Demonstrations: a task's reference solution played as the agent's own shell tool call.

No strong model is needed to show a small policy how a real agent solves a task: every task of ours
carries a reference solution, and every CLI agent has a tool that runs a shell command (its
``shell_tool``). ``SolutionTeacher`` serves a teacher run (``harnessrl.teachers.teacher``, the teacher model
string ``solutions``): it answers the agent's first call with that tool running the solution, and the
call after the tool's result with a short final message. The agent runs its own loop, unmodified, in
its sandbox: the recorded trajectory holds its real system prompt, tools and chat template, in the
policy's token ids, and the verifier grades it as any rollout. ``harnessrl sft`` trains on it.

Which task a call belongs to is read from the conversation: the task whose instruction the user's
messages hold (the longest such, when one instruction contains another).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable

from harnesses.agents.cli_agent import ShellTool
from harnesses.harness import Harness
from harnesses.registry import cli_agents
from harnesses.task import Task

SOLUTIONS = "solutions"  # the teacher model string that selects this teacher
FINAL = "Done."  # the final message after the tool's result
SOLVE_SH = "solve.sh"


class NotPlayable(ValueError):
    """A call no demonstration answers; the message names why."""

    status_code = 400


def playable_script(task: Task) -> str:
    """The commands of ``task``'s solution as one shell command (its ``[solution] env`` exported first)."""
    if not task.solution:
        raise NotPlayable(f"task {task.name} has no reference solution: add solution/solve.sh")
    extra = sorted(set(task.solution_files) - {SOLVE_SH})
    if extra:
        raise NotPlayable(
            f"task {task.name}'s solution needs files beside solve.sh ({', '.join(extra)}), which a tool call "
            f"cannot carry: demonstrate it with an upstream model (--upstream MODEL) instead"
        )
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(task.solution_env.items()))
    return exports + task.solution.strip()


class SolutionTeacher:
    """Answers an agent's calls on ``tasks`` with each task's solution as the agent's ``tool`` call."""

    def __init__(self, tasks: Iterable[Task], tool: ShellTool):
        self.tasks = sorted(tasks, key=lambda t: len(t.instruction), reverse=True)  # longest match first
        self.tool = tool
        self.played = 0

    async def answer(self, body: dict) -> dict:
        messages = body.get("messages") or []
        offered = {(t.get("function") or t).get("name") for t in body.get("tools") or []}
        if self.tool.name not in offered or _has_tool_result(messages):
            return {"role": "assistant", "content": FINAL}  # the final message, or a side call (a title)
        task = self.task_of(messages)
        self.played += 1
        call = {
            "id": f"call_{self.played}",
            "type": "function",
            "function": {"name": self.tool.name, "arguments": json.dumps(self.tool.arguments(playable_script(task)))},
        }
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    def task_of(self, messages: list[dict]) -> Task:
        said = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")
        for task in self.tasks:
            if task.instruction.strip() in said:
                return task
        raise NotPlayable(
            f"no task's instruction is in this conversation ({len(self.tasks)} tasks known): the solutions "
            f"teacher serves only the tasks of its run"
        )


def _has_tool_result(messages: list[dict]) -> bool:
    return any(m.get("role") == "tool" for m in messages)


def _text(content) -> str:
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def demonstrator(teacher: str, tasks: Iterable[Task], agent: Harness) -> SolutionTeacher | None:
    """The teacher for ``teacher``: the tasks' own solutions played as ``agent``'s shell tool calls
    (``solutions``), else None (the litellm model of that name)."""
    if teacher != SOLUTIONS:
        return None
    tool = getattr(agent, "shell_tool", None)
    if tool is None:
        raise ValueError(
            f"--upstream {SOLUTIONS} plays solutions as a CLI agent's shell tool calls; the {agent.name} "
            f"harness has none: use --harness {'|'.join(cli_agents())}"
        )
    return SolutionTeacher(tasks, tool)

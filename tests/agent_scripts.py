"""Scripts for a fake engine that drive a real agent through one exact scenario: write a file with the
agent's own write tool, then answer "Done."; a call without tools (a title, a summary) is a side call."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.fake_tokens import FakeReply

WRITE_TOOLS = (
    "write",
    "write_file",
    "Write",
)  # OpenCode and pi: write; Hermes and builtin: write_file; Claude Code: Write
PATH_KEYS = ("filePath", "path", "file_path")


def planned_write(tools: list[dict], path: str, content: str) -> tuple[str, dict]:
    """The agent's own write tool, called with ``path`` and ``content``."""
    functions = {t["function"]["name"]: t["function"] for t in tools if t.get("type") == "function"}
    name = next((n for n in WRITE_TOOLS if n in functions), None)
    assert name, f"no file-writing tool among {sorted(functions)}"
    properties = functions[name].get("parameters", {}).get("properties", {})
    return name, {next(k for k in PATH_KEYS if k in properties): path, "content": content}


def tool_then_done(call: Callable[[dict, str], tuple[str, dict]], side_reply: str) -> Callable[[dict], FakeReply]:
    """One tool call (``call(body, the last user message's text)``: its name and arguments), then "Done."
    once the tool's result follows the last user message; a call without tools gets ``side_reply``."""

    def script(body: dict) -> FakeReply:
        if not body.get("tools"):
            return FakeReply(content=side_reply)
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        if any(m["role"] == "tool" for m in messages[last_user:]):
            return FakeReply(content="Done.")
        return FakeReply(tool_calls=(call(body, json.dumps(messages[last_user]["content"])),))

    return script


def write_then_done(path: str, content: str, side_reply: str) -> Callable[[dict], FakeReply]:
    """Write the file with the agent's own write tool, then "Done."."""
    return tool_then_done(lambda body, _: planned_write(body["tools"], path, content), side_reply)


def bash_then_done(solutions: dict[str, str], side_reply: str = "A title") -> Callable[[dict], FakeReply]:
    """Run the solution of the task whose instruction the last user message holds (``solutions``:
    instruction -> shell commands) with the agent's bash tool, then "Done."."""

    def solve(_: dict, text: str) -> tuple[str, dict]:
        command = next(c for instruction, c in solutions.items() if json.dumps(instruction)[1:-1] in text)
        return "bash", {"command": command}

    return tool_then_done(solve, side_reply)

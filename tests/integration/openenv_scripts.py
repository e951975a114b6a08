"""Scripted models for CLI agents on the OpenEnv test environment (tests/openenv_env.py): the agent's
name for the environment's add tool (OpenCode: env_add, Hermes: mcp__env__add), then submit (the right
sum on odd rollouts, one more on even ones), then an answer."""

from __future__ import annotations

import itertools
import re

from tests.fake_tokens import FakeReply


def text_of(content) -> str:
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def tool_named(tools: list[dict], suffix: str) -> str:
    names = [t["function"]["name"] for t in tools if t.get("type") == "function"]
    found = [n for n in names if n.endswith(suffix)]
    assert found, f"no environment tool *{suffix} among {sorted(names)}"
    return found[0]


def mcp_script() -> callable:
    """The environment's add through OpenCode's MCP tool, then submit: right on odd rollouts, one more on even."""
    submits = itertools.count(1)

    def script(body: dict) -> FakeReply:
        if not body.get("tools"):
            return FakeReply(content="Adding numbers")  # a side call (the session title)
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [text_of(m["content"]) for m in messages[last_user:] if m["role"] == "tool"]
        if not results:
            a, b = map(int, re.search(r"compute (\d+) \+ (\d+)", text_of(messages[last_user]["content"])).groups())
            return FakeReply(tool_calls=((tool_named(body["tools"], "_add"), {"a": a, "b": b}),))
        if len(results) == 1:
            total = int(re.search(r"-?\d+", results[0]).group())
            answer = total if next(submits) % 2 else total + 1
            return FakeReply(tool_calls=((tool_named(body["tools"], "_submit"), {"answer": answer}),))
        return FakeReply(content="Submitted.")

    return script

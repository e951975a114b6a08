"""Parsing sampled text into an assistant message: reasoning, content and Hermes tool calls.

The same rules as vLLM's ``hermes`` tool parser, so an answer reads the same in both capture modes.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass

TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
THINK = re.compile(r"^\s*<think>(.*?)</think>", re.DOTALL)


@dataclass(frozen=True)
class ParsedOutput:
    content: str | None
    reasoning: str | None
    tool_calls: list[dict]  # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments"}}


def parse_output(text: str, tools_enabled: bool) -> ParsedOutput:
    reasoning = None
    think = THINK.match(text)
    if think:
        reasoning, text = think.group(1).strip(), text[think.end():]
    if not tools_enabled or "<tool_call>" not in text:
        return ParsedOutput(text, reasoning, [])
    try:
        calls = [json.loads(closed or unclosed) for closed, unclosed in TOOL_CALL.findall(text)]
        tool_calls = [_tool_call(call) for call in calls]
    except (ValueError, KeyError, TypeError):  # not a well-formed call: it stays text, as in vLLM
        return ParsedOutput(text, reasoning, [])
    content = text[: text.find("<tool_call>")]
    return ParsedOutput(content or None, reasoning, tool_calls)


def _tool_call(call: dict) -> dict:
    arguments = call.get("arguments", {})
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": call["name"],
                         "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)}}

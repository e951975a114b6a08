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
        reasoning, text = think.group(1).strip(), text[think.end() :]
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
    return {
        "id": f"call_{secrets.token_hex(12)}",
        "type": "function",
        "function": {
            "name": call["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
        },
    }


THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE = "<think>", "</think>", "<tool_call>", "</tool_call>"


def _held(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could be the start of ``tag`` (kept back)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class StreamParser:
    """``parse_output`` for text that arrives in pieces: each piece's deltas as soon as they are certain.

    ``feed`` and ``finish`` return deltas in the order of the text: ``{"reasoning": str}``,
    ``{"content": str}`` or ``{"tool_call": dict}`` (OpenAI shape, whole: a call is sent when its
    ``</tool_call>`` closes, or at the end for an unclosed last one). Text that may still turn out to be
    a tag is held back. Joined, the deltas are what ``parse_output`` gives for the whole text, except in
    two cases it only knows at the end: a ``<think>`` never closed (its text went out as reasoning, not
    as content) and a malformed call after well-formed ones (those went out as calls; the malformed
    one's text goes out as content).
    """

    def __init__(self, tools_enabled: bool):
        self.tools_enabled = tools_enabled
        self.mode = "start"  # start | reasoning | content | calls
        self.pending = ""  # text received and not yet sent
        self.reasoning_sent = False  # leading whitespace of the reasoning is dropped (it is stripped)
        self.region: list[str] = []  # the text since the first <tool_call>, sent as content if malformed
        self.calls = 0

    def feed(self, text: str) -> list[dict]:
        self.pending += text
        out: list[dict] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[dict]:
        out: list[dict] = []
        if self.mode == "start":
            self.mode = "content"
        if self.mode == "reasoning":
            self._reasoning(self.pending.rstrip(), out)
        elif self.mode == "content" and self.pending:
            out.append({"content": self.pending})
        elif self.mode == "calls" and CALL_OPEN in self.pending:  # an unclosed last call
            call = self.pending[self.pending.find(CALL_OPEN) + len(CALL_OPEN) :]
            self.region.append(self.pending)
            self.pending = ""
            self._call(call, out)
        self.pending = ""
        return out

    def _step(self, out: list[dict]) -> bool:
        """Consume what can be decided in the current mode; True when the mode changed."""
        if self.mode == "start":
            return self._start()
        if self.mode == "reasoning":
            return self._in_reasoning(out)
        if self.mode == "content":
            return self._in_content(out)
        return self._in_calls(out)

    def _start(self) -> bool:
        head = self.pending.lstrip()
        if head.startswith(THINK_OPEN):
            self.mode, self.pending = "reasoning", head[len(THINK_OPEN) :]
            return True
        if THINK_OPEN.startswith(head):
            return False  # too little text yet to know
        self.mode = "content"
        return True

    def _in_reasoning(self, out: list[dict]) -> bool:
        if not self.reasoning_sent:
            self.pending = self.pending.lstrip()  # the reasoning is stripped
        end = self.pending.find(THINK_CLOSE)
        if end >= 0:
            self._reasoning(self.pending[:end].rstrip(), out)
            self.mode, self.pending = "content", self.pending[end + len(THINK_CLOSE) :]
            return True
        # Trailing whitespace waits too: the reasoning is stripped at its end.
        sure = self.pending[: len(self.pending) - _held(self.pending, THINK_CLOSE)].rstrip()
        self._reasoning(sure, out)
        self.pending = self.pending[len(sure) :]
        return False

    def _reasoning(self, text: str, out: list[dict]) -> None:
        if text:
            self.reasoning_sent = True
            out.append({"reasoning": text})

    def _in_content(self, out: list[dict]) -> bool:
        start = self.pending.find(CALL_OPEN) if self.tools_enabled else -1
        if start >= 0:
            if start:
                out.append({"content": self.pending[:start]})
            self.mode, self.pending = "calls", self.pending[start:]
            return True
        held = _held(self.pending, CALL_OPEN) if self.tools_enabled else 0
        if sure := self.pending[: len(self.pending) - held]:
            out.append({"content": sure})
            self.pending = self.pending[len(sure) :]
        return False

    def _in_calls(self, out: list[dict]) -> bool:
        start = self.pending.find(CALL_OPEN)
        end = self.pending.find(CALL_CLOSE, start) if start >= 0 else -1
        if end < 0:
            return False
        call = self.pending[start + len(CALL_OPEN) : end]
        self.region.append(self.pending[: end + len(CALL_CLOSE)])
        self.pending = self.pending[end + len(CALL_CLOSE) :]
        self._call(call, out)
        return True

    def _call(self, text: str, out: list[dict]) -> None:
        try:
            call = _tool_call(json.loads(text))
        except (ValueError, KeyError, TypeError, AttributeError):
            # Malformed: it stays text, as in parse_output, and so does the rest of the answer.
            self.mode, self.tools_enabled = "content", False
            out.append({"content": "".join(self.region)})
            self.region = []
            return
        self.calls += 1
        out.append({"tool_call": call})

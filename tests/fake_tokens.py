"""The fake engine's tokenizer, chat template and log-probs: one id per UTF-8 byte, so tests can check ids
against text exactly; and what its scripted replies say (FakeReply)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the engine imports this module
    from tests.fake_engine import FakeEngine

BYTE_OFFSET = 3  # ids 0..2 are special: 0 = <|endoftext|>, 1 = <|im_start|>, 2 = <|im_end|>
IM_START, IM_END = 1, 2


@dataclass(frozen=True)
class FakeReply:
    content: str = ""
    tool_calls: tuple[tuple[str, dict | str], ...] = ()  # (function name, arguments: an object or exact text)
    reasoning: str = ""  # what a reasoning parser separated out (streamed first, as reasoning deltas)
    finish_reason: str | None = None  # default: "tool_calls" when calling tools, else "stop"
    raw_text: str | None = None  # exact sampled text, overriding content + tool_calls (for tito tests)


def think_text(reasoning: str) -> str:
    return f"<think>{reasoning}</think>" if reasoning else ""


def tool_call_text(name: str, args: dict | str) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def arguments_text(args: dict | str) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def encode(text: str) -> list[int]:
    return [b + BYTE_OFFSET for b in text.encode()]


def decode(ids: list[int]) -> str:
    return bytes(i - BYTE_OFFSET for i in ids if i >= BYTE_OFFSET).decode(errors="replace")


def logprob_at(position: int) -> float:
    """Deterministic fake logprob of the sampled token at ``position`` of the output."""
    return -0.125 * (position % 7)


def next_logprob_at(position: int) -> float:
    """The base model's fake log-prob of the likeliest token after a prompt of ``position`` tokens."""
    return -0.25 - 0.5 * (position % 5)


def render_chat(messages: list[dict]) -> list[int]:
    """ChatML-shaped token ids of the conversation plus the generation prompt."""
    ids: list[int] = []
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        for call in message.get("tool_calls") or []:
            content += f"<tool_call>{json.dumps(call['function'])}</tool_call>"
        ids += [IM_START, *encode(f"{message['role']}\n{content}"), IM_END, *encode("\n")]
    return ids + [IM_START, *encode("assistant\n")]


def usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def logprob_entry(engine: FakeEngine, token: int, position: int) -> dict:
    text = engine.decode_ids([token]) if token != IM_END else "<|im_end|>"
    return {"token": text, "logprob": logprob_at(position), "bytes": None, "top_logprobs": []}


def next_token(prompt_ids: list[int]) -> int:
    """The token the fake model finds likeliest after a prompt (what an adapter probe reads)."""
    return prompt_ids[-1] + 1

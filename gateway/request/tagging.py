"""Side calls: title generation, summaries and other calls an agent makes beside its main loop.

They are recorded like any call but tagged, so training leaves them out by default. Generic rules
look at the instructions; harnesses add their own (``side_patterns``, carried by the rollout's identity).

An agent sends the same instructions every turn, so the tags of each text are kept (``TEXTS_CACHED``):
scanning a long system prompt with every rule cost more than the rest of recording a call.
"""

from __future__ import annotations

import re
from functools import lru_cache

SCAN_CHARS = 4000  # of the system prompt and the last user message
TEXTS_CACHED = 1024  # instructions (and their rules) whose tags are kept

GENERIC_RULES: dict[str, re.Pattern] = {
    "title": re.compile(
        r"(title generator|generate (a |an )?(short |concise |brief )?title|"
        r"(write|create|produce|suggest) (a |an )?(short |concise |brief )?title"
        r"|title for (this|the) (conversation|chat|session))",
        re.IGNORECASE,
    ),
    "summary": re.compile(
        r"(summari[sz]e (this|the) (conversation|chat|session|history)|(detailed |concise |brief )?summary of (this|the) "
        r"(conversation|chat|session)|compact(ion)? (of )?(the )?(conversation|context|history))",
        re.IGNORECASE,
    ),
}


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("text"))
    return ""


def instructions_of(messages: list[dict]) -> str:
    """The text side-call rules look at: system prompts and the last user message."""
    system = [_text(m.get("content"))[:SCAN_CHARS] for m in messages if m.get("role") in ("system", "developer")]
    users = [m for m in messages if m.get("role") == "user"]
    last_user = _text(users[-1].get("content"))[:SCAN_CHARS] if users else ""
    return "\n".join([*system, last_user])


def side_call_tags(messages: list[dict], has_tools: bool, extra: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """Tags for a chat call; a call that offers tools is the agent's main loop, unless its last user
    message opens with an instruction its harness declared (Claude Code compacts with its main loop's
    system prompt and tools, to share the prompt cache, and asks for the summary there).

    ``extra`` are (tag, regex) rules a harness declared for its rollouts.
    """
    if has_tools:
        if not extra:  # the main loop, and no rule to look for: no need to find the last user message
            return []
        users = [m for m in messages if m.get("role") == "user"]
        opening = _text(users[-1].get("content")).lstrip()[:SCAN_CHARS] if users else ""
        return [tag for tag, regex in extra if _compiled(regex) is not None and _compiled(regex).match(opening)]
    return list(_instruction_tags(instructions_of(messages), extra))


@lru_cache(maxsize=TEXTS_CACHED)
def _instruction_tags(text: str, extra: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    tags = [tag for tag, pattern in GENERIC_RULES.items() if pattern.search(text)]
    for tag, regex in extra:
        if tag not in tags and _compiled(regex) is not None and _compiled(regex).search(text):
            tags.append(tag)
    return tuple(tags)


@lru_cache(maxsize=256)
def _compiled(regex: str) -> re.Pattern | None:
    try:
        return re.compile(regex, re.IGNORECASE)
    except re.error:  # a harness's bad pattern tags nothing rather than failing calls
        return None

"""``context_management`` edits applied to a Messages request's history, as the API applies them.

The API edits the conversation server-side before the model sees it; the gateway does the same
before rendering, so the prompt a client gets is the one the API would have built:

- ``clear_thinking_20251015``: thinking (and redacted thinking) is dropped from all but the last
  ``keep`` assistant turns that have some (default 1; ``"all"`` keeps everything, Claude Code's
  setting);
- ``clear_tool_uses_20250919``: once the prompt passes ``trigger`` (default 100,000 input tokens, or a
  number of tool uses), the results of all but the last ``keep`` tool uses (default 3) are replaced by
  a placeholder, their inputs too with ``clear_tool_inputs``; tools in ``exclude_tools`` are kept.

Edits run in the order given. An edit that clears something changes the prompt from that turn on,
which opens a new path in the call graph, as any history rewrite does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.anthropic.protocol import (
    AssistantMessage,
    ClearThinkingEdit,
    ClearToolUsesEdit,
    PromptFields,
    RedactedThinkingBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CLEARED_RESULT = "[tool result cleared to save context]"
DEFAULT_THINKING_TURNS = 1
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEPT_TOOL_USES = 3
RequestT = TypeVar("RequestT", bound=PromptFields)
Counter = Callable[[PromptFields], Awaitable[int]]  # the prompt's length in tokens


async def apply_context_edits(request: RequestT, count: Counter) -> tuple[RequestT, dict[str, int]]:
    """The request with its edits applied, and how much each kind of edit cleared."""
    edits = request.context_management.edits if request.context_management else []
    cleared: dict[str, int] = {}
    for edit in edits:
        if isinstance(edit, ClearThinkingEdit):
            request, turns = clear_thinking(request, edit)
            if turns:
                cleared["thinking_turns"] = cleared.get("thinking_turns", 0) + turns
        elif isinstance(edit, ClearToolUsesEdit) and await _triggered(request, edit, count):
            request, uses = clear_tool_uses(request, edit)
            if uses:
                cleared["tool_uses"] = cleared.get("tool_uses", 0) + uses
    return request, cleared


def clear_thinking(request: RequestT, edit: ClearThinkingEdit) -> tuple[RequestT, int]:
    if edit.keep == "all":
        return request, 0
    keep = edit.keep.value if edit.keep is not None else DEFAULT_THINKING_TURNS
    thinking = [
        i
        for i, m in enumerate(request.messages)
        if isinstance(m, AssistantMessage) and isinstance(m.content, list) and any(_is_thinking(b) for b in m.content)
    ]
    drop = set(thinking[: max(len(thinking) - keep, 0)])
    if not drop:
        return request, 0
    messages = [
        m.model_copy(update={"content": [b for b in m.content if not _is_thinking(b)] or ""}) if i in drop else m
        for i, m in enumerate(request.messages)
    ]
    return request.model_copy(update={"messages": messages}), len(drop)


def clear_tool_uses(request: RequestT, edit: ClearToolUsesEdit) -> tuple[RequestT, int]:
    excluded = set(edit.exclude_tools or ())
    uses = [
        block
        for m in request.messages
        if isinstance(m, AssistantMessage) and isinstance(m.content, list)
        for block in m.content
        if isinstance(block, ToolUseBlock) and block.name not in excluded
    ]
    keep = edit.keep.value if edit.keep is not None else DEFAULT_KEPT_TOOL_USES
    cleared = {use.id: use.name for use in uses[: max(len(uses) - keep, 0)]}
    if not cleared:
        return request, 0
    inputs = edit.clear_tool_inputs
    clear_input = (lambda name: name in inputs) if isinstance(inputs, list) else (lambda name: bool(inputs))
    messages = []
    for message in request.messages:
        if isinstance(message.content, list):
            message = message.model_copy(
                update={"content": [_cleared(b, cleared, clear_input) for b in message.content]}
            )
        messages.append(message)
    return request.model_copy(update={"messages": messages}), len(cleared)


def _cleared(block, cleared: dict[str, str], clear_input):
    if isinstance(block, ToolResultBlock) and block.tool_use_id in cleared:
        return block.model_copy(update={"content": CLEARED_RESULT})
    if isinstance(block, ToolUseBlock) and block.id in cleared and clear_input(block.name):
        return block.model_copy(update={"input": {}})
    return block


async def _triggered(request: PromptFields, edit: ClearToolUsesEdit, count: Counter) -> bool:
    trigger = edit.trigger
    if trigger is not None and trigger.type == "tool_uses":
        uses = sum(
            isinstance(b, ToolUseBlock)
            for m in request.messages
            if isinstance(m, AssistantMessage) and isinstance(m.content, list)
            for b in m.content
        )
        return uses >= trigger.value
    threshold = trigger.value if trigger is not None else DEFAULT_TRIGGER_TOKENS
    return await count(request) >= threshold


def _is_thinking(block) -> bool:
    return isinstance(block, (ThinkingBlock, RedactedThinkingBlock))

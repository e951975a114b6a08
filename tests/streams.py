"""Reading streamed answers the way clients do: tool-call deltas merged by index, the call id comment."""

from __future__ import annotations

import re

CALL_ID_COMMENT = re.compile(r"^: x-harnessrl-call-id (\d+)$", re.MULTILINE)


def merged_tool_calls(chunks) -> list[dict]:
    """Chat Completions chunks' tool-call deltas merged by index (id, name, arguments concatenated)."""
    calls: dict[int, dict] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.id
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    return [calls[index] for index in sorted(calls)]


def streamed_call_id(payload: str | bytes) -> int:
    """The call id a stream-through answer names in its SSE comment (its header comes before the call)."""
    text = payload.decode() if isinstance(payload, bytes) else payload
    found = CALL_ID_COMMENT.search(text)
    assert found, f"no call id comment in the stream: {text[-300:]!r}"
    return int(found.group(1))

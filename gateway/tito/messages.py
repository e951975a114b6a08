"""Chat messages as the template sees them: a content's text, tool-call arguments as objects."""

from __future__ import annotations

import json


def message_text(content) -> str:
    """A message content's text (text parts joined with "\\n", as the bundled templates join them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("text") is not None)
    return ""


def arguments(value):
    """Tool-call arguments parsed (a JSON string) or as given; a non-JSON string stays the raw string."""
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return value  # not JSON: compared and rendered as the raw string
    return value if value is not None else {}


def for_template(message: dict) -> dict:
    """Tool-call arguments as objects, as vLLM hands them to the template."""
    if not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call.get("function") or {})
        function["arguments"] = arguments(function.get("arguments"))
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}

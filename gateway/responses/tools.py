"""Responses tools as the model sees them, and the model's calls back in the shape the client expects.

- ``function`` tools are chat functions as they are;
- ``namespace`` tools offer each of their functions under its own name (``namespace__name`` when it
  collides with another tool's), and a call comes back as a ``function_call`` naming its namespace;
- ``custom`` (freeform) tools become functions with one string parameter, ``input`` (a grammar, when
  the tool has one, is shown in the description), and a call comes back as a ``custom_tool_call``
  whose ``input`` is that string;
- hosted tools (web_search, file_search, ...) run on OpenAI's servers, not here: they are left out
  and their types are recorded as left out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gateway.responses.protocol import CustomTool, FunctionTool, HostedTool, NamespaceTool

CUSTOM_INPUT = "input"  # the one parameter of a custom tool, as offered to the model


@dataclass(frozen=True)
class Origin:
    kind: str  # "function" | "custom"
    name: str  # the tool's own name
    namespace: str | None = None


@dataclass
class ToolIndex:
    chat_tools: list[dict] = field(default_factory=list)
    origins: dict[str, Origin] = field(default_factory=dict)  # offered name -> the client's tool
    left_out: list[str] = field(default_factory=list)

    def offered_name(self, name: str, namespace: str | None = None) -> str:
        """The name the model knows a client's tool by (for calls coming back in the input)."""
        for offered, origin in self.origins.items():
            if origin.name == name and origin.namespace == namespace:
                return offered
        return name


def index_tools(tools: list | None) -> ToolIndex:
    index = ToolIndex()
    entries: list[tuple[FunctionTool | CustomTool, str | None]] = []
    for tool in tools or ():
        if isinstance(tool, NamespaceTool):
            entries += [(member, tool.name) for member in tool.tools]
        elif isinstance(tool, HostedTool):
            index.left_out.append(tool.name or tool.type)
        else:
            entries.append((tool, None))
    counts: dict[str, int] = {}
    for tool, _ in entries:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    for tool, namespace in entries:
        offered = f"{namespace}__{tool.name}" if namespace and counts[tool.name] > 1 else tool.name
        kind = "custom" if isinstance(tool, CustomTool) else "function"
        index.origins[offered] = Origin(kind, tool.name, namespace)
        index.chat_tools.append(_chat_tool(tool, offered))
    return index


def _chat_tool(tool: FunctionTool | CustomTool, name: str) -> dict:
    if isinstance(tool, FunctionTool):
        function = {**tool.model_dump(exclude={"type"}, exclude_none=True), "name": name}
        return {"type": "function", "function": function}
    description = tool.description or ""
    form = tool.format or {}
    if form.get("type") == "grammar" and isinstance(form.get("definition"), str):
        description += f"\n\nThe input must match this {form.get('syntax', '')} grammar:\n{form['definition']}"
    parameters = {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}}, "required": [CUSTOM_INPUT]}
    return {
        "type": "function",
        "function": {"name": name, "description": description.strip(), "parameters": parameters},
    }


def custom_arguments(text: str) -> str:
    """A custom tool call's input as the function arguments the model produced for it."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The string input of a custom tool call; arguments that are not ``{"input": "..."}`` are kept whole."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
        return parsed[CUSTOM_INPUT]
    return arguments


INPUT_OPENING = re.compile(r'\s*\{\s*"input"\s*:\s*"')


class CustomInputStream:
    """A custom tool call's string input, decoded from its JSON arguments as they arrive in pieces.

    ``feed`` returns the input text the new pieces completed: the arguments are ``{"input": "..."}``
    (what the model was offered), so the text is that string's, cut only where a JSON escape cannot
    be split (``\\n``, ``\\uXXXX``, a surrogate pair). Arguments of another shape stream nothing; their
    input is sent whole when the call ends (``custom_input``).
    """

    def __init__(self) -> None:
        self.arguments = ""
        self._start: int | None = None  # where the string's text begins in ``arguments``
        self._at = 0  # how far it was decoded
        self._ended = False
        self.sent = ""

    def feed(self, piece: str) -> str:
        self.arguments += piece
        if self._start is None:
            opening = INPUT_OPENING.match(self.arguments)
            if opening is None:
                return ""
            self._start = self._at = opening.end()
        if self._ended:
            return ""
        safe = self._safe_end()
        try:
            text = json.loads(f'"{self.arguments[self._at : safe]}"') if safe > self._at else ""
        except ValueError:  # not a JSON string after all: the rest goes out whole at the end
            self._ended = True
            return ""
        self._at = safe
        self.sent += text
        return text

    def _safe_end(self) -> int:
        """The end of the longest run from ``_at`` that decodes on its own (stops at the closing quote)."""
        text, i = self.arguments, self._at
        while i < len(text):
            char = text[i]
            if char == '"':
                self._ended = True
                return i
            if char != "\\":
                i += 1
                continue
            size = 6 if text[i + 1 : i + 2] == "u" else 2
            if text[i + 1 : i + 2] == "u" and 0xD800 <= _hex(text[i + 2 : i + 6]) <= 0xDBFF:
                size = 12  # a high surrogate decodes only with its low half
            if i + size > len(text):
                break
            i += size
        return i


def _hex(digits: str) -> int:
    try:
        return int(digits, 16) if len(digits) == 4 else -1
    except ValueError:
        return -1

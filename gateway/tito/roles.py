"""Token roles of a rendered turn: which part of the conversation each of its tokens came from
(``store.records.TokenRole``, one byte a token).

A turn is rendered and tokenized once (``gateway.tito.renderer``); its roles are worked out then, from
the tokenizer's character spans over the rendered text (``Encoding.offsets``) and the character spans
of what the messages said:

- a message's content: the turn is rendered again with each content replaced by a marker, and the
  markers' places are where the contents sit. The rendering is trusted only when putting the contents
  back in the markers' places gives the rendered text exactly (a template that changes, trims or
  inspects a content does not), so a content is never looked for by search and found in the glue;
- an assistant turn: everything between the template's assistant header (the generation prompt) and
  its last end-of-turn token (content, tool calls, reasoning);
- the tools: what they add to the first turn (the turn rendered with and without them, compared).

A token carrying any character of a content takes its role (a token the template's newline and a
result's last newline share is the result's); the other tokens are ``TEMPLATE``. A turn whose contents
cannot be placed is ``UNKNOWN`` throughout, never guessed.
"""

from __future__ import annotations

import numpy as np
from tokenizers import Encoding

from gateway.tito.messages import for_template, message_text
from gateway.tito.template import ModelText
from store.records import TokenRole
from store.roles import ROLES  # one TokenRole a token, as the store keeps them

ROLE_OF_MESSAGE = {
    "system": TokenRole.SYSTEM,
    "developer": TokenRole.SYSTEM,
    "user": TokenRole.USER,
    "tool": TokenRole.TOOL,
    "function": TokenRole.TOOL,
    "ipython": TokenRole.TOOL,
    "assistant": TokenRole.ASSISTANT,
}
MARKER = "\ue000{}\ue001"  # private-use characters around a content's index: in no real content

Span = tuple[int, int, int]  # start, end (characters of the rendered turn), role


def filled(role: int, count: int) -> np.ndarray:
    return np.full(count, role, ROLES)


class TurnRoles:
    """Roles of one model's rendered turns (its template and tokenizer: ``ModelText``)."""

    def __init__(self, text: ModelText, header: str):
        self.text = text
        self.header = header  # the assistant header: the generation prompt's text
        self.eos = text.eos_text

    def of(self, turn: list[dict], tools: list[dict] | None, rendered: str, encoding: Encoding) -> np.ndarray:
        """Each token's role (``UNKNOWN`` throughout when the turn's contents cannot be placed)."""
        offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        spans = self.spans(turn, tools, rendered)
        if spans is None:
            return filled(TokenRole.UNKNOWN, len(offsets))
        roles = filled(TokenRole.TEMPLATE, len(offsets))
        starts, ends = offsets[:, 0], offsets[:, 1]
        for start, end, role in spans:
            if end > start:
                roles[(starts < end) & (ends > start)] = role
        return roles

    def spans(self, turn: list[dict], tools: list[dict] | None, rendered: str) -> list[Span] | None:
        """The character spans of the turn's tools, contents and assistant bodies, with their roles;
        None when one cannot be placed."""
        spans: list[Span] = []
        if tools:
            bare = self.text.template.render([for_template(m) for m in turn])
            spans.append((*_difference(bare, rendered), TokenRole.SYSTEM))
        marked, contents = [], []
        for index, message in enumerate(turn):
            role = ROLE_OF_MESSAGE.get(message.get("role"))
            if role is None:
                return None
            content = message_text(message.get("content"))
            if role == TokenRole.ASSISTANT:
                body = self._assistant_body(rendered) if len(turn) == 1 else None
                if body is None:
                    return None
                spans.append((*body, role))
            elif content:
                marker = MARKER.format(index)
                contents.append((marker, content, role))
                message = {**message, "content": marker}
            marked.append(for_template(message))
        if not contents:
            return spans
        placed = _placed(self.text.template.render(marked, tools), contents, rendered)
        return None if placed is None else spans + placed

    def _assistant_body(self, rendered: str) -> tuple[int, int] | None:
        """Where an assistant turn's own text lies: after the header, before its last end-of-turn."""
        end = rendered.rfind(self.eos) if self.eos else -1
        if not rendered.startswith(self.header) or end < len(self.header):
            return None
        return len(self.header), end


def _placed(marked: str, contents: list[tuple[str, str, int]], rendered: str) -> list[Span] | None:
    """The contents' spans in ``rendered``, from their markers' places in ``marked``; None unless the
    contents put in those places make ``rendered`` exactly."""
    spans, pieces, length, position = [], [], 0, 0
    for marker, content, role in contents:
        at = marked.find(marker, position)
        if at < 0:
            return None
        length += at - position
        spans.append((length, length + len(content), role))
        pieces += (marked[position:at], content)
        length += len(content)
        position = at + len(marker)
    pieces.append(marked[position:])
    return spans if "".join(pieces) == rendered else None


def _difference(bare: str, rendered: str) -> tuple[int, int]:
    """The span of ``rendered`` that ``bare`` lacks: what lies between their common prefix and suffix."""
    prefix = _common(bare, rendered, lambda s, n: s[:n])
    room = min(len(bare), len(rendered)) - prefix
    suffix = _common(bare, rendered, lambda s, n: s[len(s) - n :], room)
    return prefix, len(rendered) - suffix


def _common(a: str, b: str, part, limit: int | None = None) -> int:
    """The longest n (at most ``limit``) with part(a, n) == part(b, n): a binary search of string
    comparisons (in C), not a loop over characters."""
    low, high = 0, min(len(a), len(b)) if limit is None else limit
    while low < high:
        middle = (low + high + 1) // 2
        if part(a, middle) == part(b, middle):
            low = middle
        else:
            high = middle - 1
    return low

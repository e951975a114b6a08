"""Request bodies parsed once per new message: what a rollout resends is not parsed again.

An agent resends its whole conversation every turn, ~100 kB of JSON at 32k tokens: parsing it all
again costs time linear in the history (about 0.2 ms a turn here). Per rollout the last body's text
is kept up to the end of its last message, with what that part parsed to. A body that begins with
exactly that text (compared in C) has only the rest parsed: its new messages, and the keys after the
messages array. The known messages are the same objects as before, so the comparisons after this one
(``gateway.request.validated_history``, ``store.request_delta``) are comparisons of identities.

The result equals ``json.loads`` of the whole body (same keys, same order, same values): equal text
before, the standard decoder on the rest. A body this does not read simply (a rewritten history, a
repeated key, no messages array, anything malformed) is parsed whole, which also reports its errors.
The text is kept per rollout, whose token only its own agent holds: an agent leans only on its own.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from json.decoder import WHITESPACE

from gateway.request.json_body import (
    SURROGATE_ESCAPE,
    json_depth_exceeds,
    parse_json_object,
    refuse_constant,
    refuse_lone_surrogates,
    too_deep,
)

ROLLOUTS_CACHED = 512  # rollouts whose last body is kept (the least recently used go)
_DECODER = json.JSONDecoder(parse_constant=refuse_constant)


@dataclass(frozen=True)
class KnownBody:
    """A body's text up to the end of its last message, and what that part parsed to."""

    text: str  # from "{" to the end of the last message (no "," or "]" after it)
    head: dict  # the keys before "messages", parsed, in order
    messages: list  # the messages array, parsed


class _Unreadable(Exception):
    """The body is not one this module reads (it is parsed whole instead)."""


class ResentBodies:
    def __init__(self, field: str = "messages", rollouts: int = ROLLOUTS_CACHED):
        self.field, self.rollouts = field, rollouts
        self._known: OrderedDict[int, KnownBody] = OrderedDict()

    def parse(self, raw: bytes, rollout_id: int, check_depth: bool = True) -> dict:
        """``raw`` as a JSON object, its known part not parsed again (``parse_json_object`` otherwise)."""
        known = self._known.get(rollout_id)
        try:
            text = raw.decode()
            body, last, new_from = self._read(text, known)
        except (_Unreadable, ValueError, IndexError, RecursionError):  # JSON and UTF-8 errors are ValueErrors
            self._known.pop(rollout_id, None)
            return parse_json_object(raw, check_depth)
        if check_depth and json_depth_exceeds(body):  # the chat route checks what is new (ValidatedHistory)
            raise too_deep()
        if SURROGATE_ESCAPE.search(text, new_from):  # the known text was searched when it was new
            refuse_lone_surrogates(body)
        self._remember(rollout_id, last)
        return body

    def _read(self, text: str, known: KnownBody | None) -> tuple[dict, KnownBody, int]:
        """The body, its known part from now on, and where its text not known before begins."""
        if known is not None and text.startswith(known.text):
            new_from = len(known.text)
            head, messages = known.head, list(known.messages)
            i, last_end = _elements(text, _skip(text, new_from), messages, last_end=new_from)
            body = {**head, self.field: messages}
        else:  # the members up to the messages array, which must come (else: _Unreadable)
            new_from, body, i = 0, {}, _skip(text, _expect(text, _skip(text, 0), "{"))
            while self.field not in body:
                key, i = _key(text, i)
                if key in body:
                    raise _Unreadable  # a repeated key: json.loads's own rule decides
                if key == self.field:
                    head, messages = dict(body), []
                    body[key] = messages
                    i, last_end = _elements(text, _skip(text, _expect(text, i, "[")), messages, last_end=None)
                else:
                    body[key], i = _value(text, i)
                    i = _skip(text, _expect(text, _skip(text, i), ","))
        known_now = KnownBody(text[:last_end], head, messages)
        i = _skip(text, i)
        while text[i] != "}":  # the members after the messages array
            key, i = _key(text, _skip(text, _expect(text, i, ",")))
            if key in body:
                raise _Unreadable
            body[key], i = _value(text, i)
            i = _skip(text, i)
        if _skip(text, i + 1) != len(text):
            raise _Unreadable  # text after the object: json.loads refuses it
        return body, known_now, new_from

    def _remember(self, rollout_id: int, known: KnownBody) -> None:
        if not known.messages:
            self._known.pop(rollout_id, None)
            return
        self._known[rollout_id] = known
        self._known.move_to_end(rollout_id)
        while len(self._known) > self.rollouts:
            self._known.popitem(last=False)


def _skip(text: str, i: int) -> int:
    return WHITESPACE.match(text, i).end()


def _expect(text: str, i: int, char: str) -> int:
    if text[i : i + 1] != char:
        raise _Unreadable
    return i + 1


def _value(text: str, i: int) -> tuple[object, int]:
    return _DECODER.raw_decode(text, i)


def _key(text: str, i: int) -> tuple[str, int]:
    """A member's key and the index after its ":" and the whitespace around it."""
    if text[i : i + 1] != '"':
        raise _Unreadable
    key, i = _value(text, i)
    return key, _skip(text, _expect(text, _skip(text, i), ":"))


def _elements(text: str, i: int, into: list, last_end: int | None) -> tuple[int, int]:
    """The array's elements from ``i`` appended to ``into``; the index past its "]" and the end of its
    last element. ``last_end``: where the element before ``i`` ended (None: ``i`` opens the array)."""
    if last_end is None:
        if text[i : i + 1] == "]":
            return i + 1, i
    else:
        if text[i : i + 1] == "]":
            return i + 1, last_end
        i = _skip(text, _expect(text, i, ","))
    while True:
        value, i = _value(text, i)
        into.append(value)
        last_end = i
        i = _skip(text, i)
        if text[i : i + 1] == "]":
            return i + 1, last_end
        i = _skip(text, _expect(text, i, ","))

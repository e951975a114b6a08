"""Engine request bodies encoded once per new message, not once per resent history.

An agent resends its whole conversation every turn, and the gateway sends it on to the engine:
encoding it as JSON again costs time linear in the history (~80 µs a turn at 32k tokens). Per rollout
the messages of its last engine body are kept with their JSON. A body whose messages begin with those
very objects (an identity check: the chat route parses a resent history into the same objects,
``gateway.request.resent_bodies``) has only its new messages encoded, the known JSON copied in front of them.
Equal objects are not enough: ``1`` and ``1.0`` are equal and encode differently, and the engine must
get exactly what the client sent. Messages are never changed after they are parsed, which the reuse
relies on, as ``gateway.request.validated_history`` does.

The result is an ``EncodedBody``: the body as a (read-only) dict, for whoever routes or inspects it,
with its JSON, which ``gateway.engine.client.encoded`` sends as is.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_

import orjson

ROLLOUTS_CACHED = 1024  # rollouts whose last engine messages are kept (their JSON: ~130 kB at 32k tokens)
# Where a value made elsewhere goes in an encoded body: orjson writes a NUL inside a string as \u0000,
# so a raw one appears nowhere else.
VALUE_MARK = orjson.Fragment(b"\x00")


class EncodedBody(dict):
    """A request body with its JSON made; read-only, so the two cannot disagree."""

    def __init__(self, body: dict, data: bytes):
        super().__init__(body)
        self.data = data

    def _read_only(self, *args, **kwargs):
        raise TypeError("an EncodedBody is read-only; copy it ({**body, ...}) to change it")

    __setitem__ = __delitem__ = pop = popitem = update = setdefault = clear = _read_only


def with_json(body: dict, key: str, parts: Sequence[bytes | memoryview]) -> tuple[EncodedBody, memoryview]:
    """``body`` encoded, ``key``'s value written as ``parts`` joined (its JSON, made by the caller), and
    a view of that value in the body's JSON. The body is encoded with a marker where the value goes,
    which is then joined in: the value's JSON is copied once, straight into the body sent."""
    frame = orjson.dumps({**body, key: VALUE_MARK})
    at = frame.index(b"\x00")
    data = b"".join((frame[:at], *parts, frame[at + 1 :]))
    return EncodedBody(body, data), memoryview(data)[at : len(data) - (len(frame) - at - 1)]


@dataclass(frozen=True)
class _KnownMessages:
    messages: list  # the objects last encoded (compared by identity)
    data: memoryview  # their JSON array: a view of the body it was sent in


class EngineBodies:
    def __init__(self, rollouts: int = ROLLOUTS_CACHED):
        self.rollouts = rollouts
        self._known: OrderedDict[int, _KnownMessages] = OrderedDict()

    def encode(self, rollout_id: int, body: dict) -> dict:
        """``body`` with its JSON made, the rollout's known messages not encoded again; ``body`` itself
        when it cannot be encoded here (no messages list, or a value orjson refuses).

        The body is encoded with a marker for its messages, which are then joined in: the history's
        JSON is copied once a turn, straight into the body sent."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        try:
            encoded, data = with_json(body, "messages", self._messages_parts(rollout_id, messages))
        except TypeError:  # e.g. an integer over 64 bits: the engine client's own encoding handles it
            return body
        self._remember(rollout_id, messages, data)
        return encoded

    def _messages_parts(self, rollout_id: int, messages: list) -> tuple[bytes | memoryview, ...]:
        """What joins to the messages' JSON array: the known part reused when they extend it."""
        known = self._known.get(rollout_id)
        count = len(known.messages) if known is not None else 0
        if known is not None and 0 < count <= len(messages) and all(map(is_, known.messages, messages)):
            new = messages[count:]
            return (known.data[:-1], b",", orjson.dumps(new)[1:]) if new else (known.data,)
        return (orjson.dumps(messages),)

    def _remember(self, rollout_id: int, messages: list, data: memoryview) -> None:
        self._known[rollout_id] = _KnownMessages(list(messages), data)  # a copy: the caller's list may grow
        self._known.move_to_end(rollout_id)
        while len(self._known) > self.rollouts:
            self._known.popitem(last=False)

"""Requests stored as what each call adds beyond its parent, so a rollout's bytes grow linearly in turns.

An agent resends its whole history (and its tools, and its system prompt) on every turn: stored as
received, turn n repeats turns 1..n-1 and a rollout's request bytes grow with the square of its turns.
A call whose parent (the call graph's) is known is stored as a delta against the parent's request,
one operation per top-level key in the child's key order:

- ``["=", key]``: the parent's value, unchanged (tools, system prompt, model, settings);
- ``["+", key, items]``: the parent's list followed by ``items`` (the history and its new turns);
- ``[":", key, value]``: a value of its own.

``decode`` rebuilds the request exactly (same keys in the same order, same values): its JSON is
byte-identical to the received body's (see ``same`` for the one exception). A request that itself
carries the delta marker (an agent can send any key) is stored as an explicit delta without a
parent, so it never reads as one. Parents are looked up only within the same rollout.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

MARKER = "$harnessrl_delta"
RECENT_PER_ROLLOUT = 4  # requests kept per rollout as delta bases (subagents interleave a few deep)
ROLLOUTS_CACHED = 1024  # rollouts whose recent requests are kept in memory


def encode(request: dict, parent_id: int | None, parent: Mapping[str, Any] | None) -> dict:
    """The form to store: ``request`` itself, or a delta against ``parent`` (the request of ``parent_id``)."""
    if parent is None or parent_id is None:
        return (
            {MARKER: {"parent": None, "keys": [[":", k, v] for k, v in request.items()]}}
            if MARKER in request
            else request
        )
    ops: list[list] = []
    for key, value in request.items():
        base = parent.get(key, _ABSENT)
        if base is not _ABSENT and same(base, value):
            ops.append(["=", key])
        elif (
            isinstance(value, list)
            and isinstance(base, list)
            and len(base) <= len(value)
            and same(value[: len(base)], base)
        ):
            ops.append(["+", key, value[len(base) :]])
        else:
            ops.append([":", key, value])
    return {MARKER: {"parent": parent_id, "keys": ops}}


def same(a: Any, b: Any) -> bool:
    """Equal values of the same top-level type.

    Python's ``==`` (fast, in C) is used deep down: a resent value that changed only between ``1``,
    ``1.0`` and ``true`` inside a message reads back as the parent's. Token ids and samples never come
    from stored requests, so this touches only how a request is displayed; checking types all the way
    down would cost a Python-level walk of the whole history on every call.
    """
    return type(a) is type(b) and a == b


def parent_of(stored: Any) -> int | None:
    """The call a stored request is a delta against; None for a request stored whole."""
    return stored[MARKER]["parent"] if is_delta(stored) else None


def is_delta(stored: Any) -> bool:
    return isinstance(stored, dict) and len(stored) == 1 and isinstance(stored.get(MARKER), dict)


def decode(stored: Any, parent: Mapping[str, Any] | None) -> Any:
    """The request as received, from its stored form and its parent's decoded request."""
    if not is_delta(stored):
        return stored
    base = parent or {}
    request: dict = {}
    for op in stored[MARKER]["keys"]:
        kind, key = op[0], op[1]
        if kind == "=":
            request[key] = base[key]
        elif kind == "+":
            request[key] = [*base[key], *op[2]]
        else:
            request[key] = op[2]
    return request


def decode_all(stored: Mapping[int, Any]) -> dict[int, Any]:
    """Decode every request of ``stored`` (call id -> stored form; the deltas' parents included)."""
    decoded: dict[int, Any] = {}
    for call_id in sorted(stored):  # a parent is an earlier call: its id is smaller
        parent = parent_of(stored[call_id])
        decoded[call_id] = decode(stored[call_id], decoded.get(parent) if parent is not None else None)
    return decoded


class RecentRequests:
    """The last few requests of each recent rollout, as delta bases for its next calls (bounded)."""

    def __init__(self) -> None:
        self._rollouts: OrderedDict[int, OrderedDict[int, dict]] = OrderedDict()

    def get(self, rollout_id: int, call_id: int | None) -> dict | None:
        recent = self._rollouts.get(rollout_id)
        return None if recent is None or call_id is None else recent.get(call_id)

    def add(self, rollout_id: int, call_id: int, request: dict) -> None:
        recent = self._rollouts.setdefault(rollout_id, OrderedDict())
        self._rollouts.move_to_end(rollout_id)
        recent[call_id] = request
        while len(recent) > RECENT_PER_ROLLOUT:
            recent.popitem(last=False)
        while len(self._rollouts) > ROLLOUTS_CACHED:
            self._rollouts.popitem(last=False)


class _Absent:
    pass


_ABSENT = _Absent()

"""Which engine serves a call: the choice, as small pure functions behind a swappable ``Router``.

Every call of a rollout goes to the engine its first call went to (vLLM's prefix cache holds its
history there). A new rollout, or one whose engine was taken out, goes to the least-loaded healthy
engine that serves the call's model (the base model or the version of the rollout's policy, ``<policy>-v<N>``):
least calls in flight and queued, then fewest rollouts, then the first listed. Nothing a client
sends takes part: the choice reads the rollout id (from its token, resolved by the store) and the
engine model the gateway resolved, never a header or a body field. Each call's route (where it went,
how long it queued) is recorded with it (``begin_call``, ``served_fields``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence, Set
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

ROLLOUTS_KEPT = 100_000  # rollouts whose engine is remembered (the least recently seen go first)


@dataclass(frozen=True)
class EngineLoad:
    """One engine as the router sees it when choosing."""

    index: int  # its place in the pool (the order of --engine-url)
    healthy: bool
    in_flight: int  # calls sent to it, not yet answered
    queued: int  # calls waiting for one of its in-flight slots
    rollouts: int  # rollouts routed to it
    models: Set[str]  # engine model names it serves (base model and loaded adapters); read, never changed


@dataclass(frozen=True)
class Choice:
    index: int  # the engine that serves the call
    moved_from: int | None = None  # the engine the rollout was on, when that one was taken out


def load_key(engine: EngineLoad) -> tuple[int, int, int]:
    """What "least loaded" compares: calls in flight and queued, then rollouts, then pool order."""
    return engine.in_flight + engine.queued, engine.rollouts, engine.index


def least_loaded(engines: Sequence[EngineLoad], model: str, exclude: frozenset[int] = frozenset()) -> int | None:
    """The least-loaded healthy engine serving ``model``; a healthy one without it only when none has it
    (it gets the model loaded on the call's miss, ``gateway.policy.adapters.RecoveringEngine``); None: none healthy."""
    healthy = [e for e in engines if e.healthy and e.index not in exclude]
    serving = [e for e in healthy if model in e.models] or healthy
    return min(serving, key=load_key).index if serving else None


def choose(
    engines: Sequence[EngineLoad], model: str, sticky: int | None, exclude: frozenset[int] = frozenset()
) -> Choice | None:
    """The rollout's engine if it still serves (``sticky``), else the least-loaded one; None: none healthy."""
    if sticky is not None and sticky not in exclude and engines[sticky].healthy:
        return Choice(sticky)
    index = least_loaded(engines, model, exclude)
    if index is None:
        return None
    return Choice(index, moved_from=sticky if sticky is not None and sticky != index else None)


class Router(Protocol):
    """Where a call goes (the pool asks; ``StickyLeastLoaded`` is the default)."""

    def route(
        self, rollout_id: int | None, model: str, engines: Sequence[EngineLoad], exclude: frozenset[int] = frozenset()
    ) -> Choice | None: ...

    def rollouts_on(self, index: int) -> int: ...


class StickyLeastLoaded:
    """Rollouts stay on their engine (prefix cache); new and moved ones go to the least-loaded one."""

    def __init__(self, kept: int = ROLLOUTS_KEPT):
        self._engine_of: OrderedDict[int, int] = OrderedDict()  # rollout id -> engine index
        self._counts: dict[int, int] = {}
        self._kept = kept

    def route(
        self, rollout_id: int | None, model: str, engines: Sequence[EngineLoad], exclude: frozenset[int] = frozenset()
    ) -> Choice | None:
        sticky = self._engine_of.get(rollout_id) if rollout_id is not None else None
        choice = choose(engines, model, sticky, exclude)
        if choice is not None and rollout_id is not None and choice.index != sticky:
            self._assign(rollout_id, choice.index, sticky)
        elif rollout_id is not None and sticky is not None:
            self._engine_of.move_to_end(rollout_id)
        return choice

    def rollouts_on(self, index: int) -> int:
        return self._counts.get(index, 0)

    def _assign(self, rollout_id: int, index: int, previous: int | None) -> None:
        if previous is not None:
            self._counts[previous] -= 1
        self._engine_of[rollout_id] = index
        self._engine_of.move_to_end(rollout_id)
        self._counts[index] = self._counts.get(index, 0) + 1
        while len(self._engine_of) > self._kept:
            _, gone = self._engine_of.popitem(last=False)
            self._counts[gone] -= 1


@dataclass(eq=False)
class CallRoute:
    """Where one call went: filled in by the pool, recorded with the call."""

    rollout_id: int | None
    engine: str | None = None  # the engine's base URL
    queue_ms: float = 0.0  # waiting for an in-flight slot, milliseconds (summed over a failover)
    moved_from: str | None = None  # the failed engine its rollout was moved from, on this call


# The call being routed, per request. Set by ``begin_call`` in the awaiting coroutine's own context, so
# the pool (awaited by it) and the commit that records the call (its tasks copy the context) see it.
call_route: ContextVar[CallRoute | None] = ContextVar("call_route", default=None)


def begin_call(rollout_id: int | None) -> CallRoute:
    route = CallRoute(rollout_id)
    call_route.set(route)
    return route


def served_fields() -> dict:
    """The current call's route as ``CallRecord`` fields (empty outside a routed call)."""
    route = call_route.get()
    if route is None or route.engine is None:
        return {}
    return {"engine": route.engine, "queue_ms": route.queue_ms, "moved_from": route.moved_from}

"""SDK retries: a request the client sends again is recorded as a retry of the first, not a new turn.

The OpenAI and Anthropic SDKs resend a request that timed out or lost its connection, with header
``x-stainless-retry-count`` > 0; other clients resend the same body. The retry's answer is the one
the agent goes on with, so the call it retries is tagged ``retried`` (and ``undelivered``: its client
gave up on it) and left out of samples, whether it committed before the retry came or after. A call
is a retry when it carries the header, or when its rollout sends the same body while the first is
still in flight for at least ``MIN_RETRY_GAP_S`` (the SDKs wait at least ~0.4 s before a retry; the
same body sent again sooner is a deliberate parallel call); the first is the rollout's most recent
call with that body (in flight or among its last ``RECENT`` committed calls).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from contextvars import ContextVar
from dataclasses import dataclass, field

from store.records import CallTag

RETRY_HEADER = b"x-stainless-retry-count"
RETRIED = CallTag.RETRIED
MIN_RETRY_GAP_S = 0.3  # an in-flight call younger than this is not what a client without the header retries
RECENT = 2  # committed calls per rollout a header retry is matched against
ROLLOUTS_KEPT = 256  # rollouts whose recent calls are kept (the least recently used go)

# Set per request by the gateway's ASGI boundary: the client's retry count (0: a first attempt).
retry_count: ContextVar[int] = ContextVar("retry_count", default=0)


@dataclass(eq=False)
class Attempt:
    """One call of a rollout, from its start until it is committed (``call_id``) or fails."""

    rollout_id: int
    request: dict  # the client's body
    started: float = field(default_factory=time.monotonic)  # seconds (monotonic clock)
    call_id: int | None = None
    superseded: bool = False  # a retry of it came: tag it when it commits
    retry_of: Attempt | None = None


@dataclass
class RetryBook:
    """The in-flight and recent calls of each rollout, to tell a retry from a new turn."""

    _in_flight: dict[int, list[Attempt]] = field(default_factory=dict)
    _recent: OrderedDict[int, deque[Attempt]] = field(default_factory=OrderedDict)

    def begin(self, rollout_id: int, request: dict, header_retry: bool) -> Attempt:
        attempt = Attempt(rollout_id, request)
        in_flight = self._in_flight.setdefault(rollout_id, [])
        waited = [a for a in in_flight if header_retry or attempt.started - a.started >= MIN_RETRY_GAP_S]
        candidates = [*reversed(waited), *(reversed(self._recent.get(rollout_id, ())) if header_retry else ())]
        if candidates:  # only then are bodies compared: a first attempt, or parallel calls, cost nothing
            attempt.retry_of = next((a for a in candidates if a.request == request), None)
            if attempt.retry_of is not None and attempt.retry_of.call_id is None:
                attempt.retry_of.superseded = True
        in_flight.append(attempt)
        return attempt

    def end(self, attempt: Attempt) -> None:
        in_flight = self._in_flight.get(attempt.rollout_id, [])
        if attempt in in_flight:
            in_flight.remove(attempt)
        if not in_flight:
            self._in_flight.pop(attempt.rollout_id, None)
        if attempt.call_id is not None:
            attempt.retry_of = None  # keep no chain of bodies alive
            self._recent.setdefault(attempt.rollout_id, deque(maxlen=RECENT)).append(attempt)
            self._recent.move_to_end(attempt.rollout_id)
            if len(self._recent) > ROLLOUTS_KEPT:
                self._recent.popitem(last=False)

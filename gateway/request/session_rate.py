"""How fast one live key may open sessions: a token bucket per key, spent only by a session that opens.

Every call of a live key may open a session (a rollout: rows in the store, a group, a pinned version);
one key looping over new session names opened 300 in 5 s. A key holds ``burst`` sessions' worth of
tokens and earns ``per_minute`` back; a call that would open a session with none left is a 429 with
Retry-After, in the client's dialect, and its key's open session is left as it was.

A key's opens take turns (``opening``): calls racing to open see what the one before them opened (and
join it, or open the next), so concurrent opens spend a token each, as sequential ones do; an open that
still loses (another gateway moved the session) gives its token back. The buckets and turns are the
gateway process's own (several gateways: each bounds the key by itself).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

KEYS_KEPT = 100_000  # keys whose bucket is remembered (the least recently seen go first: a full bucket)


@dataclass
class SessionRate:
    per_minute: float  # sessions a key earns back per minute; 0: no bound
    burst: int  # sessions a key may open at once
    clock: Callable[[], float] = time.monotonic
    _buckets: OrderedDict[int, tuple[float, float]] = field(default_factory=OrderedDict)  # key id -> tokens, at
    _turns: dict[int, tuple[asyncio.Lock, int]] = field(default_factory=dict)  # key id -> its lock, calls at it

    def take(self, key_id: int) -> float | None:
        """Take one session for ``key_id``: None when it may open one, else the seconds until it may."""
        if self.per_minute <= 0:
            return None
        now = self.clock()
        tokens, at = self._buckets.pop(key_id, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.per_minute / 60.0)
        if tokens < 1.0:
            self._buckets[key_id] = (tokens, now)
            return (1.0 - tokens) * 60.0 / self.per_minute
        self._buckets[key_id] = (tokens - 1.0, now)
        while len(self._buckets) > KEYS_KEPT:
            self._buckets.popitem(last=False)
        return None

    def give_back(self, key_id: int) -> None:
        """Return a token ``take`` gave for a session that did not open."""
        if key_id in self._buckets:
            tokens, at = self._buckets[key_id]
            self._buckets[key_id] = (min(float(self.burst), tokens + 1.0), at)

    @asynccontextmanager
    async def opening(self, key_id: int) -> AsyncIterator[None]:
        """``key_id``'s turn to open a session: one call at a time per key. A key's entry goes with its
        last waiting call, so the table holds only the keys opening now."""
        lock, calls = self._turns.get(key_id) or (asyncio.Lock(), 0)
        self._turns[key_id] = (lock, calls + 1)
        try:
            async with lock:
                yield
        finally:
            lock, calls = self._turns[key_id]
            if calls > 1:
                self._turns[key_id] = (lock, calls - 1)
            else:
                del self._turns[key_id]


def retry_after_s(wait_s: float) -> int:
    """A Retry-After header's whole seconds, at least 1."""
    return max(1, math.ceil(wait_s))

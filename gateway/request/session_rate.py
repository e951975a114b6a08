"""How fast one live key may open sessions: a token bucket per key.

Every call of a live key may open a session (a rollout: rows in the store, a group, a pinned version);
one key looping over new session names opened 300 in 5 s. A key holds ``burst`` sessions' worth of
tokens and earns ``per_minute`` back; a call that would open a session with none left is a 429 with
Retry-After, in the client's dialect, and its key's open session is left as it was. The buckets are
the gateway process's own (several gateways: each bounds the key by itself).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

KEYS_KEPT = 100_000  # keys whose bucket is remembered (the least recently seen go first: a full bucket)


@dataclass
class SessionRate:
    per_minute: float  # sessions a key earns back per minute; 0: no bound
    burst: int  # sessions a key may open at once
    clock: Callable[[], float] = time.monotonic
    _buckets: OrderedDict[int, tuple[float, float]] = field(default_factory=OrderedDict)  # key id -> tokens, at

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


def retry_after_s(wait_s: float) -> int:
    """A Retry-After header's whole seconds, at least 1."""
    return max(1, math.ceil(wait_s))

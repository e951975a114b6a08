"""One sandbox's bridge caps and the timeouts of its agent's request side, and its refusal budget.

Defaults are per sandbox, chosen for real agents (a few pooled connections, a handful of calls at once);
everything above them is a flood, answered with 429 or 408 on that agent's own connections only.
"""

from __future__ import annotations

import contextlib
import resource
import time
from dataclasses import dataclass

# Per sandbox. Agents keep a few pooled connections and a handful of calls at once (subagents, title
# and summary calls beside the main loop); everything above is a flood.
MAX_CONNECTIONS = 64  # open agent connections
MAX_IN_FLIGHT = 32  # requests forwarded and not yet answered in full
# The agent's request side only (a client sends a request at once, in one go over loopback).
HEADER_TIMEOUT_S = 30.0  # seconds for the request line + headers (from accept, or from the first byte)
BODY_READ_TIMEOUT_S = 30.0  # seconds a request body may go without a byte
BODY_TIMEOUT_S = 300.0  # seconds for a whole request body
# Longer than clients' own pool expiry (httpx 5 s, undici 4 s, reqwest 90 s), so they close first.
IDLE_TIMEOUT_S = 120.0  # seconds a keep-alive connection may wait for its next request
OVER_CAP_WAIT_S = 1.0  # seconds an over-cap connection may take to send its head before the 429
RETRY_AFTER_S = 1  # seconds, the Retry-After of a 429
# Refusing costs this process CPU however fast an agent reconnects; past this many error answers a
# second (real agents get none), a bridge stops accepting until its budget refills, and the kernel's
# backlog holds that agent's further connections, at no cost to the other sandboxes.
REFUSALS_PER_S = 20.0  # error answers a second (and at most this many at once)
ACCEPT_BACKLOG = 128  # connections the kernel holds for a bridge that is not accepting
ACCEPT_RETRY_S = 0.1  # seconds before accepting again after the process ran out of descriptors


@dataclass(frozen=True)
class BridgeLimits:
    """One sandbox's caps and its request side's timeouts (the module's constants by default)."""

    max_connections: int = MAX_CONNECTIONS
    max_in_flight: int = MAX_IN_FLIGHT
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_read_timeout_s: float = BODY_READ_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    idle_timeout_s: float = IDLE_TIMEOUT_S
    over_cap_wait_s: float = OVER_CAP_WAIT_S
    refusals_per_s: float = REFUSALS_PER_S


class Load:
    """What one sandbox holds now (connections served, connections being refused, requests in flight)
    and its refusal budget, a token bucket."""

    def __init__(self, refusals_per_s: float = REFUSALS_PER_S) -> None:
        self.connections = self.refusing = self.in_flight = 0
        self.refusals_per_s = refusals_per_s
        self._tokens, self._stamp = refusals_per_s, time.monotonic()

    def refused(self) -> None:
        self._refill()  # answers on connections already open may overdraw it, by a second's worth at most
        self._tokens = max(-self.refusals_per_s, self._tokens - 1)

    def refusals_wait_s(self) -> float:
        """Seconds until the budget allows another refusal (0: now)."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.refusals_per_s

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.refusals_per_s, self._tokens + (now - self._stamp) * self.refusals_per_s)
        self._stamp = now


class RequestTimeout(Exception):
    """The agent's request side took too long; the message says which part."""


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the soft limit now.

    Every agent connection through a bridge holds two descriptors in this process (agent side and
    gateway side), and 1,024 (a common default) is a few hundred connections for all sandboxes together.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)  # Linux caps at nr_open
    if target > soft:
        with contextlib.suppress(ValueError, OSError):  # e.g. nr_open below an unlimited hard limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]

"""The one way to send a request to the gateway's control plane (runner, learner, CLI): which transport
errors are retried, with what backoff, and the named errors a caller sees.

Retried: transport errors where the gateway may never have seen the request, or its answer was lost
(it is restarting, it closed a kept-alive connection as the request went out, a timeout), and ``503``
(its engine or its store is briefly unavailable: a store locked by another process, a full disk),
after at least the ``Retry-After`` it names (up to the backoff's longest wait). Every request the
callers send is safe to repeat: reads, rollout creation with a request id the retry repeats, ending a
rollout with its rewards (a repeat is a 409 "already ended" the caller resolves; a 503 wrote nothing),
a reward (it sets its named component, never adds to it), publishing a version (a repeat is a 409 the
learner checks). Any other answer is returned to the caller, who names the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

RETRYABLE = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ReadTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
RETRY_STATUS = 503


class GatewayUnreachable(RuntimeError):
    """Transport errors outlasted the retries; the message says how to start or point at the gateway."""


@dataclass(frozen=True)
class Backoff:
    retries: int = 3  # attempts after the first
    first_s: float = 0.2
    factor: float = 2.0
    max_s: float = 10.0

    def delays(self) -> list[float]:
        return [min(self.first_s * self.factor**k, self.max_s) for k in range(self.retries)]


async def send(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    backoff: Backoff,
    unreachable_hint: str,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    **kwargs,
) -> tuple[int, httpx.Response]:
    """(attempts, the answer): transport errors and 503s retried per ``backoff``; GatewayUnreachable
    (naming ``unreachable_hint``) when transport errors outlast them. A last 503 is returned."""
    delays = backoff.delays()
    for attempt in range(1, len(delays) + 2):
        delay = delays[attempt - 1] if attempt <= len(delays) else 0.0
        try:
            response = await client.request(method, url, **kwargs)
            if response.status_code != RETRY_STATUS or attempt > len(delays):
                return attempt, response
            delay = max(delay, retry_after_s(response, backoff.max_s))
        except RETRYABLE as exc:
            if attempt > len(delays):
                raise GatewayUnreachable(
                    f"gateway at {url} unreachable after {attempt} attempts "
                    f"({type(exc).__name__}: {exc}); {unreachable_hint}"
                ) from exc
        await sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def retry_after_s(response: httpx.Response, most_s: float) -> float:
    """The seconds a 503 asks to wait (``Retry-After``; at most ``most_s``, 0 when absent or a date)."""
    value = response.headers.get("retry-after", "")
    return min(float(value), most_s) if value.isdigit() else 0.0

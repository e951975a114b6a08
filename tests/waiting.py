"""Waiting for background work in tests: poll the condition itself, never sleep a fixed time and hope.

The deadline only guards against a hang; it is generous because a shared CI machine (load average 20)
can be many times slower than a laptop, and a test that waits longer than needed costs nothing when
the condition comes true early.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 120.0  # a guard against hanging, not a speed check
INTERVAL_S = 0.02


def wait_until(
    condition: Callable[[], T], what: str, timeout_s: float = DEADLINE_S, interval_s: float = INTERVAL_S
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(interval_s)
    return result


async def until(
    condition: Callable[[], T | Awaitable[T]],
    what: str,
    timeout_s: float = DEADLINE_S,
    interval_s: float = INTERVAL_S,
) -> T:
    """``wait_until`` on the event loop: ``condition`` may be a plain or an async function."""
    deadline = time.monotonic() + timeout_s
    while not (result := await _value(condition())):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(interval_s)
    return result


async def _value(result):
    return await result if isinstance(result, Awaitable) else result

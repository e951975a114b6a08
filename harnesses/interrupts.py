"""SIGTERM stops a run as Ctrl-C does.

Without a handler, SIGTERM (what `kill`, `timeout` and service managers send) ends the process at once:
its docker containers live on and its rollouts stay `running` until their leases expire. With one, the
main task is cancelled instead: each sandbox closes (its container removed), each rollout in flight ends
cancelled (interrupted: a rerun replaces it) and an evaluation writes what it has.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_cancels_this_task() -> Iterator[None]:
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (RuntimeError, ValueError):  # not the main thread (a test's runner): SIGTERM keeps its default
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)

"""SIGTERM stops a run as Ctrl-C does.

Without a handler, SIGTERM (what `kill`, `timeout` and service managers send) ends the process at once:
its docker containers live on and its rollouts stay `running` until their leases expire. With one, the
main task is cancelled instead: each sandbox closes (its container removed), each rollout in flight ends
cancelled (interrupted: a rerun replaces it) and an evaluation writes what it has.

Scopes nest: a quickstart's held-out evaluation runs as a task beside its rounds and opens a scope of
its own. The outermost scope keeps SIGTERM, so a SIGTERM stops the whole quickstart (which cancels the
evaluation on its way out), never just the evaluation, and an inner scope's end does not leave SIGTERM
unhandled (the next SIGTERM would kill the process at once, its rollouts in flight left running).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# the task whose scope holds SIGTERM; tasks created inside the scope inherit it (asyncio copies the context)
_HOLDER: ContextVar[asyncio.Task | None] = ContextVar("sigterm_holder", default=None)


@contextmanager
def sigterm_cancels_this_task() -> Iterator[None]:
    """SIGTERM cancels the current task while inside; inside an outer scope, SIGTERM stays the outer's."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    holder = _HOLDER.get()
    if holder is not None and not holder.done():
        yield
        return
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (RuntimeError, ValueError):  # not the main thread (a test's runner): SIGTERM keeps its default
        yield
        return
    token = _HOLDER.set(task)
    try:
        yield
    finally:
        _HOLDER.reset(token)
        loop.remove_signal_handler(signal.SIGTERM)

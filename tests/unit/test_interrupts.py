"""SIGTERM stops the whole run, also while an evaluation with a scope of its own runs beside it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

from rollouts.interrupts import sigterm_cancels_this_task


async def evaluation(ready: asyncio.Event, ended: asyncio.Event) -> None:
    """An evaluation beside the rounds: its own scope, open until cancelled."""
    try:
        with sigterm_cancels_this_task():
            ready.set()
            await asyncio.Event().wait()
    finally:
        ended.set()


async def test_sigterm_during_an_inner_scope_stops_the_outer_task_not_only_the_inner():
    async def rounds() -> str:
        ready, ended = asyncio.Event(), asyncio.Event()
        with sigterm_cancels_this_task():
            beside = asyncio.create_task(evaluation(ready, ended))
            try:
                await ready.wait()
                os.kill(os.getpid(), signal.SIGTERM)
                await ended.wait()  # stopped here: only an inner scope that took SIGTERM ends first
            except asyncio.CancelledError:
                return "stopped"
            finally:
                beside.cancel()  # as the quickstart does on its way out
        return "went on"

    assert await asyncio.create_task(rounds()) == "stopped"


SCRIPT = textwrap.dedent(
    """
    import asyncio, os, signal
    from rollouts.interrupts import sigterm_cancels_this_task

    async def inner():
        with sigterm_cancels_this_task():
            await asyncio.sleep(0)

    async def main():
        with sigterm_cancels_this_task():
            await asyncio.create_task(inner())  # its scope opens and closes inside this one
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                print("stopped on purpose")

    asyncio.run(main())
    """
)


def test_an_inner_scope_that_ended_leaves_sigterm_to_the_outer_one():
    # in a process of its own: without the outer handler, SIGTERM kills whatever process receives it
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, cwd=os.getcwd())
    assert (done.returncode, done.stdout.strip()) == (0, "stopped on purpose"), done.stderr

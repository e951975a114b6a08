"""`harnessrl tasks check`: load the tasks, check them with a running count, print the table."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harnesses.environments import Environments
from harnesses.task import load_tasks, unhonoured_warning
from rollouts.checks import CheckSettings, check_tasks, table
from sandboxes.kinds import checked_options, sandbox_kind


def launch_check(
    path: Path, sandbox: str, concurrency: int, allow_internet: bool, allow_unisolated: bool, console
) -> int:
    """0 when every task is sound, 1 otherwise (the table says which and why)."""
    kind = sandbox_kind(sandbox)  # read once: every check's sandboxes take the Kind
    options = asyncio.run(checked_options(kind, allow_unisolated))
    tasks = load_tasks(path)
    if not tasks:
        raise ValueError(f"no tasks under {path}")
    if (ignored := unhonoured_warning(tasks)) is not None:
        console.print(ignored, markup=False, highlight=False)
    settings = CheckSettings(sandbox=kind, concurrency=concurrency, sandbox_options=options)
    environments = Environments(allow_internet=allow_internet)
    done = []

    def progress(check) -> None:
        done.append(check)
        mark = "ok" if check.ok else "FAILED"
        console.print(f"[{len(done)}/{len(tasks)}] {check.task}: {mark}")

    checks = asyncio.run(check_tasks(tasks, settings, environments, progress))
    console.print(table(checks))
    failed = [c for c in checks if not c.ok]
    console.print(
        f"{len(checks) - len(failed)} of {len(checks)} tasks sound"
        + (f"; failing: {', '.join(c.task for c in failed)}" if failed else "")
    )
    return 1 if failed else 0

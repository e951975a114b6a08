"""`harnessrl tasks check PATH`: is every task of a dataset sound?

For each task, in parallel: the oracle (the reference solution as the agent) must score 1, and an
agent that does nothing should score 0 (a task that passes untouched checks nothing). Each runs as a
rollout would, in its own sandbox of the task's image, graded where a rollout is graded (a fresh
sandbox holding only the working directory, unless the task says ``grade_in = "agent_sandbox"``:
harnesses/grading/grade.py) by the task's own verifier; no gateway and no model are involved. A failure
names the task and the reason: build error, agent or verifier timeout, verifier error, or the reward it
got with the tests that failed.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from harnesses.agents.oracle import NopHarness, OracleHarness
from harnesses.environments import Environments, TaskEnvironmentError
from harnesses.grading.grade import final_answer, grade
from harnesses.harness import RolloutTarget
from harnesses.task import Task
from sandboxes import Limits, SandboxSpec, create_sandbox
from sandboxes.kinds import KINDS, Kind

NO_GATEWAY = RolloutTarget(base_url="http://127.0.0.1:9/r/none/v1", token="none")  # neither agent calls it


@dataclass(frozen=True)
class Attempt:
    """One agent on one task."""

    reward: float | None  # None when it did not get a reward
    reason: str | None = None  # why not, or why the reward is wrong; None when it is as expected
    seconds: float = 0.0


@dataclass(frozen=True)
class TaskCheck:
    task: str
    oracle: Attempt
    nop: Attempt

    @property
    def ok(self) -> bool:
        return self.oracle.reason is None and self.nop.reason is None

    @property
    def reasons(self) -> list[str]:
        return [f"{who}: {a.reason}" for who, a in (("oracle", self.oracle), ("do-nothing", self.nop)) if a.reason]


@dataclass(frozen=True)
class CheckSettings:
    sandbox: Kind = KINDS["docker"]  # a kind of sandboxes.kinds, as `tasks check --sandbox` named it
    concurrency: int = 4  # tasks at once (each runs its two agents one after the other)
    sandbox_options: dict | None = None  # e.g. {"isolation": "bwrap"}
    limits: Limits = Limits(memory_bytes=2 * 2**30, cpus=1.0)


async def check_tasks(
    tasks: list[Task], settings: CheckSettings, environments: Environments, on_done=lambda check: None
) -> list[TaskCheck]:
    """Every task checked, ``settings.concurrency`` at a time, in the order given."""
    limit = asyncio.Semaphore(settings.concurrency)

    async def one(task: Task) -> TaskCheck:
        async with limit:
            check = await check_task(task, settings, environments)
            on_done(check)
            return check

    return list(await asyncio.gather(*[one(task) for task in tasks]))


async def check_task(task: Task, settings: CheckSettings, environments: Environments) -> TaskCheck:
    oracle = await attempt(task, OracleHarness(), settings, environments)
    if oracle.reason and oracle.reason.startswith("build error"):
        return TaskCheck(task.name, oracle, Attempt(None, "not run (the image did not build)"))
    return TaskCheck(task.name, oracle, await attempt(task, NopHarness(), settings, environments))


async def attempt(task: Task, harness, settings: CheckSettings, environments: Environments) -> Attempt:
    started = asyncio.get_running_loop().time()
    try:
        reward, reason = await _play(task, harness, settings, environments)
    except TaskEnvironmentError as exc:
        reward, reason = None, f"build error: {exc}"
    except Exception as exc:  # noqa: BLE001 - any crash is this task's failure, named in the table
        reward, reason = None, f"{type(exc).__name__}: {exc}"
    return Attempt(reward, reason, asyncio.get_running_loop().time() - started)


async def _play(
    task: Task, harness, settings: CheckSettings, environments: Environments
) -> tuple[float | None, str | None]:
    base = SandboxSpec(limits=settings.limits, name=f"check-{task.name}"[:40])
    base = await environments.sandbox_spec(task, harness.name, settings.sandbox, base)
    spec = environments.with_plain_image(harness.sandbox_spec(task, NO_GATEWAY, base), settings.sandbox)
    async with await create_sandbox(settings.sandbox, spec, **(settings.sandbox_options or {})) as sandbox:
        outcome = await harness.run(sandbox, task, NO_GATEWAY, task.agent_timeout_s)
        if outcome.timed_out:
            return None, f"agent timeout: the solution ran past the task's {task.agent_timeout_s:.0f} s"
        fresh = await environments.grading_spec(task, settings.sandbox, spec)
        final = await final_answer(sandbox, outcome.final_text)
        verdict = await grade(settings.sandbox, sandbox, task, fresh, settings.sandbox_options, final)
    if verdict.error:
        kind = "verifier timeout" if "timed out" in verdict.error else "verifier error"
        return verdict.reward, f"{kind}: {verdict.error}; output: {said_by(verdict.output)}"
    expected = harness.expected_reward
    if verdict.reward != expected:
        said = f"; solve.sh exit code {outcome.exit_code}" if harness.name == "oracle" and outcome.exit_code else ""
        where = FRESH_HINT if fresh is not None and harness.name == "oracle" else ""
        return verdict.reward, (
            f"reward {verdict.reward:g}, expected {expected:g}{said}; verifier: {said_by(verdict.output)}{where}"
        )
    return verdict.reward, None


FRESH_HINT = (
    " (graded in a fresh sandbox holding only the working directory: if the verifier needs what the "
    'solution left elsewhere, set [verifier] grade_in = "agent_sandbox" in task.toml)'
)
# pytest's summary ("FAILED tests/test_x.py::test_y - AssertionError") and verbose ("...::test_y FAILED") lines
FAILED_TEST = re.compile(r"^FAILED (\S+)|^(\S+::\S+) FAILED\b", re.MULTILINE)


def said_by(output: str) -> str:
    """What the verifier's output says went wrong: the tests that failed, else its last line."""
    failed = list(dict.fromkeys(a or b for a, b in FAILED_TEST.findall(output)))
    if failed:
        shown = ", ".join(failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else "")
        return f"failed {shown}"
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return repr(lines[-1][:200]) if lines else "(no output)"


def table(checks: list[TaskCheck]):
    """A rich table: one row per task, oracle and do-nothing rewards, and what went wrong."""
    from rich.table import Table

    view = Table(title="tasks check: the oracle must score 1, doing nothing should score 0")
    for column in ("task", "oracle", "do-nothing", "result"):
        view.add_column(column, overflow="fold")
    for check in checks:
        cells = [_cell(a) for a in (check.oracle, check.nop)]
        result = "ok" if check.ok else "; ".join(check.reasons)
        view.add_row(check.task, *cells, f"[green]{result}[/]" if check.ok else f"[red]{result}[/]")
    return view


def _cell(attempt: Attempt) -> str:
    value = "-" if attempt.reward is None else f"{attempt.reward:g}"
    return f"{value} ({attempt.seconds:.0f} s)"

"""`harnessrl eval`: k rollouts per task per policy, each pinned to its policy, as one evaluation run.

Every rollout is created with ``"policy"`` (``POST /api/rollouts``), so the gateway serves all its calls
by that version whatever the agent asks for; ``latest`` is read once, at the start, and evaluated as
the version it named then. A policy's rollouts are the run's round ``version`` in groups named after
it: rerunning the same command resumes, as ``harnessrl run`` does. The jobs interleave the policies
(index 0 of every task for every policy first), so a partial evaluation compares like with like.

The numbers written at the end (``eval.json``, the table, the PNG) are the gateway's run summary, read
from the store (``GET /api/runs/{run}/summary``): the same the viewer shows. The terminal table while it
runs counts the runner's results as they come in.

A teacher (``teacher:MODEL``, a litellm model string) is one more policy: its rollouts run through a
teacher gateway of their own on the store (``harnessrl.teachers.teacher``) into the run ``<run>-teacher:MODEL`` (``/`` as ``_``),
and its row (and per-task cells) come from that run's summary, so one table reads base / adapter / teacher.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from contracts.gateway_client import GatewayClient, GatewayRefused
from harnesses.grading.judge import Judge
from harnesses.harness import Harness
from harnesses.task import Task
from rollouts.budget import DEFAULT_WALL_FACTOR
from rollouts.interrupts import sigterm_cancels_this_task
from rollouts.run_plan import RolloutResult, RunPlan
from rollouts.runner import Runner
from sandboxes import SandboxSpec
from sandboxes.kinds import KINDS, Kind
from store.capture_modes import TEACHER_CAPTURE, CaptureMode
from store.passk import TaskCount, policy_label, policy_results
from store.policies import DEFAULT_POLICY, LATEST, InvalidPolicyName, parse_pin
from store.records import RolloutStatus

ROLLOUTS_PATH = "/api/rollouts"
TEACHER_PREFIX = "teacher:"


@dataclass(frozen=True)
class EvalPlan:
    run: str
    tasks: list[Task]
    harness: Harness
    policies: tuple[str, ...]  # as asked: base | latest | <policy>@latest | <policy>@v<N> | <policy>-v<N> | teacher:M
    k: int  # rollouts per task per policy
    concurrency: int
    sandbox: Kind = KINDS["local"]
    sampling: dict = field(default_factory=lambda: {"temperature": 1.0, "top_p": 1.0})  # the eval run's
    base_spec: SandboxSpec = field(default_factory=SandboxSpec)
    sandbox_options: dict = field(default_factory=dict)
    wall_factor: float = DEFAULT_WALL_FACTOR
    judge: Judge | None = None  # an LLM judge scoring each rollout (the reward component "judge")
    harness_name: str | None = None  # as asked (e.g. oneshot); default: the harness's name
    # teacher:MODEL policies: the store their gateway records into, the policy's tokenizer, the API base
    database_url: str | None = None
    policy_model: Path | None = None
    teacher_base_url: str | None = None
    capture: CaptureMode | None = (
        None  # the policies' runs' capture mode (store.capture_modes); a teacher's is TEACHER_CAPTURE
    )
    policy: str = DEFAULT_POLICY  # the policy a pin without one names (base, latest)

    @property
    def harness_label(self) -> str:
        return self.harness_name or self.harness.name


@dataclass(frozen=True)
class PinnedRunPlan(RunPlan):
    """A runner plan whose rollouts are pinned: its groups are named after the policy."""

    pin: str = "base"

    @property
    def group(self) -> str:
        return self.pin


class EvalClient(GatewayClient):
    async def summary(self, run: str) -> dict:
        return await self._json("GET", f"/api/runs/{quote(run, safe='')}/summary")


class PinningClient(EvalClient):
    """The runner's gateway client, creating every rollout pinned to one policy."""

    def __init__(self, url: str, admin_key: str | None, pin: str):
        super().__init__(url, admin_key)
        self.pin = pin

    async def _json(self, method: str, path: str, **kwargs) -> dict:
        if method == "POST" and path == ROLLOUTS_PATH:
            kwargs["json"] = {**kwargs["json"], "policy": self.pin}
        return await super()._json(method, path, **kwargs)


@dataclass(frozen=True)
class Resolved:
    """A policy as asked and the version it is evaluated as."""

    asked: str
    version: int  # a teacher's: 0 (its gateway serves no adapter)
    teacher: str | None = None  # the litellm model string of a teacher:MODEL policy
    policy: str = DEFAULT_POLICY  # the policy (store.policies) whose version it is

    @property
    def label(self) -> str:
        """How results name it, and the pin its rollouts carry: ``base``, ``<policy>-v<N>`` or the teacher."""
        return self.asked if self.teacher else policy_label(self.version, self.policy)

    @property
    def round(self) -> int:
        """Its runner round in the evaluation run (slot leases and resumption go by it): the version for
        the default policy (as before policies had names), else one of the policy's own (2^20 versions a policy)."""
        if self.version == 0 or self.policy == DEFAULT_POLICY:
            return self.version
        return (zlib.crc32(self.policy.encode()) % 2000 + 1) * 2**20 + self.version % 2**20

    @property
    def live_version(self) -> int:
        """Its key in the terminal table: a teacher's is negative (its rows are version 0 of its own run)."""
        return -1 - abs(hash(self.asked)) % 1000 if self.teacher else self.version

    def run(self, eval_run: str) -> str:
        """The run its rollouts go to: a teacher's own, next to the evaluation run."""
        return f"{eval_run}-{self.asked.replace('/', '_')}" if self.teacher else eval_run  # run names take no /


def resolve_policies(
    asked: tuple[str, ...], current_version: int | Mapping[str, int], default: str = DEFAULT_POLICY
) -> list[Resolved]:
    """Each asked policy as a policy and version (``latest``: its current one, from ``current_version``:
    per policy, or the default policy's), duplicates dropped, in order. A pin without a policy names
    ``default``; ValueError names the grammar."""
    currents = current_version if isinstance(current_version, Mapping) else {default: current_version}
    found, seen = [], set()
    for name in asked:
        if name.startswith(TEACHER_PREFIX) and name.removeprefix(TEACHER_PREFIX):
            if name not in seen:
                seen.add(name)
                found.append(Resolved(name, 0, name.removeprefix(TEACHER_PREFIX)))
            continue
        try:
            pin = parse_pin(name)
        except InvalidPolicyName as exc:
            raise ValueError(
                f"--policies takes a pin (base, latest, pi@latest, pi@v3, pi-v3) or teacher:MODEL: {exc}"
            ) from None
        policy = pin.policy or default
        version = currents.get(policy, 0) if pin.version == LATEST else pin.version
        key = (0, DEFAULT_POLICY) if version == 0 else (version, policy)  # the base model is one, whoever asks
        if key not in seen:
            seen.add(key)
            found.append(Resolved(name, version, policy=key[1]))
    return found


async def _current_version(control: EvalClient, policy: str, own: str) -> int:
    """The version the gateway serves ``policy`` now. The plan's ``own`` policy may have no rollout yet (a
    training run's base-model evaluation comes first): the base model; any other unknown policy is the
    gateway's 404, which names the known ones."""
    try:
        return int((await control.policy(policy)).get("current_version", 0))
    except GatewayRefused as exc:
        if exc.status_code == 404 and policy == own:
            return 0
        raise


def pinned_policies(asked: tuple[str, ...], default: str = DEFAULT_POLICY) -> set[str]:
    """The policies the asked pins name (a pin without one names ``default``)."""
    names = set()
    for name in asked:
        if not name.startswith(TEACHER_PREFIX):
            try:
                names.add(parse_pin(name).policy or default)
            except InvalidPolicyName:
                pass  # resolve_policies says what is wrong with it
    return names


@dataclass
class LiveCounts:
    """Results so far, per (version, task), for the terminal table (a pass: total reward >= 1)."""

    k: int
    cells: dict[tuple[int, str, str], list[RolloutResult]] = field(default_factory=dict)
    total: int = 0

    def add(self, version: int, result: RolloutResult, policy: str = DEFAULT_POLICY) -> None:
        self.cells.setdefault((version, policy, result.task), []).append(result)

    def task_counts(self) -> list[TaskCount]:
        counts = []
        for (version, policy, task), results in sorted(self.cells.items()):
            rewards = [(r.reward or 0.0) if r.status == RolloutStatus.FINISHED else 0.0 for r in results]
            counts.append(
                TaskCount(
                    version,
                    task,
                    len(results),
                    sum(r.status == RolloutStatus.FINISHED and (r.reward or 0.0) >= 1.0 for r in results),
                    sum(r.status == RolloutStatus.FAILED for r in results),
                    sum(rewards),
                    sum(x * x for x in rewards),
                    policy,
                )
            )
        return counts

    def results(self):
        return policy_results(self.task_counts(), self.k)


async def run_evaluation(
    plan: EvalPlan,
    gateway_url: str,
    admin_key: str | None,
    on_update: Callable[[LiveCounts], None] = lambda counts: None,
) -> dict:
    """Run what is pending of the evaluation; return the run summary's per-policy results as eval.json."""
    control = EvalClient(gateway_url, admin_key)
    clients: list[EvalClient] = []
    try:
        with ExitStack() as teachers:
            current = {
                name: await _current_version(control, name, plan.policy)
                for name in sorted(pinned_policies(plan.policies, plan.policy))
            }
            policies = resolve_policies(plan.policies, current, plan.policy)
            runners = []
            for policy in policies:
                url = _teacher_url(plan, policy, admin_key, teachers) if policy.teacher else gateway_url
                client = PinningClient(url, admin_key, "base" if policy.teacher else policy.label)
                clients.append(client)
                runners.append((policy, Runner(_runner_plan(plan, policy), client)))
            live = LiveCounts(plan.k)
            jobs = await _interleaved_jobs(runners)
            live.total = len(jobs)
            on_update(live)
            interrupted = await _run_until_stopped(_run_jobs(jobs, plan.concurrency, live, on_update))
            summary = await control.summary(plan.run)
            taught = {p.asked: await c.summary(p.run(plan.run)) for p, c in zip(policies, clients) if p.teacher}
    finally:
        for client in (control, *clients):
            await client.close()
    document = eval_document(plan, policies, summary, taught)
    if interrupted:  # eval.json holds what ended before Ctrl-C or SIGTERM; rerunning the command resumes it
        document["interrupted"] = True
    return document


async def _run_until_stopped(jobs) -> bool:
    """Run ``jobs``; True when Ctrl-C or SIGTERM stopped them (their rollouts in flight are cancelled)."""
    try:
        with sigterm_cancels_this_task():
            await jobs
    except asyncio.CancelledError:
        asyncio.current_task().uncancel()  # stopped on purpose: the summary of what ended is still read
        return True
    return False


def _teacher_url(plan: EvalPlan, policy: Resolved, admin_key: str | None, stack: ExitStack) -> str:
    """A teacher gateway on the evaluation's store for ``policy``, open until ``stack`` closes."""
    from harnessrl.teachers.teacher import TeacherSettings, teacher_gateway

    if not (plan.database_url and plan.policy_model):
        raise ValueError(f"{policy.asked} needs the store and the policy's model folder (--database-url, --model)")
    settings = TeacherSettings(model=policy.teacher, tokenizer_dir=plan.policy_model, api_base=plan.teacher_base_url)
    return stack.enter_context(teacher_gateway(settings, plan.database_url, admin_key or ""))


def _runner_plan(plan: EvalPlan, policy: Resolved) -> PinnedRunPlan:
    return PinnedRunPlan(
        run=policy.run(plan.run),
        tasks=plan.tasks,
        harness=plan.harness,
        group_size=plan.k,
        concurrency=plan.concurrency,
        sandbox=plan.sandbox,
        base_spec=plan.base_spec,
        sampling=plan.sampling,
        sandbox_options=plan.sandbox_options,
        round=policy.round,
        wall_factor=plan.wall_factor,
        pin=policy.label,
        judge=plan.judge,
        teacher=policy.teacher,
        capture=TEACHER_CAPTURE if policy.teacher else plan.capture,
        policy=plan.policy,
    )


async def _interleaved_jobs(runners: list[tuple[Resolved, Runner]]) -> list[tuple[Resolved, Runner, Task, int]]:
    pending = [(policy, runner, await runner.pending()) for policy, runner in runners]
    jobs = [(policy, runner, task, index) for policy, runner, todo in pending for task, index in todo]
    return sorted(jobs, key=lambda job: (job[3], job[2].name, job[0].version))


async def _run_jobs(jobs, concurrency: int, live: LiveCounts, on_update: Callable[[LiveCounts], None]) -> None:
    limit = asyncio.Semaphore(concurrency)

    async def one(policy: Resolved, runner: Runner, task: Task, index: int) -> None:
        async with limit:
            result = await runner.run_one(task, index)
        live.add(policy.live_version, result, policy.policy)
        on_update(live)

    try:
        async with asyncio.TaskGroup() as group:  # a gateway error (e.g. an unknown version) stops them all
            for job in jobs:
                group.create_task(one(*job))
    except ExceptionGroup as errors:
        raise _first(errors) from None


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def eval_document(plan: EvalPlan, policies: list[Resolved], summary: dict, taught: dict | None = None) -> dict:
    """eval.json: the plan, and the summary's results for the policies evaluated (in the order asked);
    ``taught``: each teacher's own run summary, by the name asked (its version 0 row is the teacher's)."""
    taught = taught or {}
    by_version = {row["version"]: row for row in summary.get("policies", [])}
    labels = {p.label for p in policies}
    rows = []
    for p in policies:
        found = {r["version"]: r for r in taught[p.asked].get("policies", [])} if p.teacher else by_version
        if p.version in found:
            rows.append({"asked": p.asked, **found[p.version], **({"policy": p.label} if p.teacher else {})})
    cells: dict[str, dict] = {row["task"]: dict(row["policies"]) for row in summary.get("policy_tasks", [])}
    for asked, teacher_summary in taught.items():
        for row in teacher_summary.get("policy_tasks", []):
            if "base" in row["policies"]:
                cells.setdefault(row["task"], {})[asked] = row["policies"]["base"]
    per_task = [
        {"task": task, "policies": {label: cell for label, cell in found.items() if label in labels}}
        for task, found in cells.items()
    ]
    return {
        "run": plan.run,
        "harness": plan.harness_label,
        "k": plan.k,
        "sampling": plan.sampling,
        "tasks": [t.name for t in plan.tasks],
        "policies": rows,
        "per_task": [row for row in per_task if row["policies"]],
    }


def write_outputs(document: dict, out_dir: Path) -> tuple[Path, Path]:
    """eval.json and eval.png in ``out_dir``."""
    import json

    from harnessrl.evaluation.view import save_eval_png

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "eval.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path, save_eval_png(document, out_dir / "eval.png")


def eval_harness(name: str, sandbox: Kind | str) -> Harness:
    """The harness by name (``harnesses.registry``)."""
    from harnesses.registry import create_harness

    return create_harness(name, sandbox)


def evaluate(plan: EvalPlan, gateway_url: str, admin_key: str | None, out_dir: Path, console) -> dict:
    """Run the evaluation under a terminal table, then print the store's tables; write eval.json and eval.png."""
    from rich.live import Live

    from harnessrl.evaluation.view import final_tables, live_table

    def table(counts: LiveCounts):
        done = sum(len(results) for results in counts.cells.values())
        return live_table(plan.run, counts.results(), done, counts.total, plan.k)

    with Live(table(LiveCounts(plan.k)), console=console, refresh_per_second=2) as live:
        document = asyncio.run(run_evaluation(plan, gateway_url, admin_key, lambda c: live.update(table(c))))
    for rendered in final_tables(document):
        console.print(rendered)
    json_path, png_path = write_outputs(document, out_dir)
    document["files"] = {"json": str(json_path), "png": str(png_path)}
    return document

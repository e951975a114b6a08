"""Evaluating a training run on held-out tasks every N policy versions (`quickstart`, `train`: eval_every).

The base model is evaluated first, then the current version whenever it is ``every`` or more versions
past the last one evaluated. Each evaluation is `harnessrl eval` of that one pinned version into the
run ``<run>-eval`` (the learner trains only its own run, so it never sees these rollouts), and its
numbers (``eval_pass_at_1``, ``eval_pass_at_k``, ``eval_reward_mean``, ...) are merged into the learner's
metrics of the first step at that version: the viewer's learner charts and ``GET /api/runs/{run}/steps``
show them, and `harnessrl report` plots the evaluation run per version.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from dataclasses import dataclass, field

from contracts.gateway_client import GatewayClient
from harnesses.harness import Harness
from harnesses.task import Task
from harnessrl.evaluation.evaluate import EvalPlan, run_evaluation
from learner.intake import trained_policy
from sandboxes import SandboxSpec
from sandboxes.kinds import KINDS, Kind
from store.capture_modes import CaptureMode
from store.passk import policy_label
from store.policies import DEFAULT_POLICY
from store.store import Store

logger = logging.getLogger(__name__)
EVAL_SUFFIX = "-eval"


def eval_run_name(run: str) -> str:
    return f"{run}{EVAL_SUFFIX}"


@dataclass(frozen=True)
class EvalEvery:
    every: int  # policy versions between evaluations
    tasks: list[Task]  # the held-out split
    harness: Harness
    k: int = 4
    concurrency: int = 4
    sandbox: Kind = KINDS["local"]  # as the config (or the learner's settings) read it
    sandbox_options: dict = field(default_factory=dict)
    base_spec: SandboxSpec = field(default_factory=SandboxSpec)
    temperature: float = 1.0
    capture: CaptureMode | None = None  # the eval run's capture mode (store.capture_modes); None: the gateway's default
    policy: str | None = DEFAULT_POLICY  # the policy whose versions are evaluated (store.policies); None: the run's


async def served_version(client: GatewayClient, policy: str = DEFAULT_POLICY) -> int:
    """The version the gateway serves a policy's new rollouts now (0: the base model, or a policy it
    does not know yet: nothing of it was published)."""
    for summary in await client.policies():
        if summary["policy"] == policy:
            return int(summary["current_version"])
    return 0


class PeriodicEval:
    def __init__(self, settings: EvalEvery, run: str, gateway_url: str, admin_key: str | None, store: Store):
        self.settings, self.run, self.gateway_url, self.admin_key, self.store = (
            settings,
            run,
            gateway_url,
            admin_key,
            store,
        )
        self.evaluated: set[int] | None = None  # versions the eval run holds (read once from the store)
        self.results: dict[int, dict] = {}  # version -> the eval_* metrics of this process's evaluations

    @property
    def policy(self) -> str:
        """The policy whose versions it evaluates (the run's, once ``check`` read it)."""
        return self.settings.policy or DEFAULT_POLICY

    def due(self, current: int) -> bool:
        if not self.evaluated:
            return True  # the base model (or whatever is current) first: the baseline
        return current >= max(self.evaluated) + self.settings.every

    async def check(self) -> dict | None:
        """Evaluate the current version if it is due; its eval_* metrics, or None."""
        if self.settings.policy is None:  # the run's: known once its first rollout made it
            if not await self.store.listings.run_exists(self.run):
                return None
            self.settings = dataclasses.replace(self.settings, policy=await trained_policy(self.store, self.run))
        if self.evaluated is None:
            self.evaluated = await self._evaluated_versions()
        client = GatewayClient(self.gateway_url, self.admin_key)
        try:
            current = await served_version(client, self.policy)
        finally:
            await client.close()
        if not self.due(current):
            return None
        return await self.evaluate(current)

    async def evaluate(self, version: int) -> dict:
        s = self.settings
        plan = EvalPlan(
            run=eval_run_name(self.run),
            tasks=s.tasks,
            harness=s.harness,
            policies=(policy_label(version, self.policy),),
            k=s.k,
            concurrency=s.concurrency,
            sandbox=s.sandbox,
            sampling={"temperature": s.temperature, "top_p": 1.0},
            base_spec=s.base_spec,
            sandbox_options=s.sandbox_options,
            capture=s.capture,
            policy=self.policy,
        )
        document = await run_evaluation(plan, self.gateway_url, self.admin_key)
        if document.get("interrupted"):  # Ctrl-C or SIGTERM stops the caller too; part of an eval is no score
            raise asyncio.CancelledError(f"the evaluation of {policy_label(version, self.policy)} was interrupted")
        [row] = document["policies"]
        metrics = {
            "eval_version": version,
            "eval_k": row["k"],
            "eval_tasks": row["tasks"],
            "eval_rollouts": row["rollouts"],
            "eval_pass_at_1": row["pass_at_1"],
            "eval_pass_at_k": row["pass_at_k"],
            "eval_reward_mean": row["reward_mean"],
            "eval_failures": row["failures"],
        }
        run_id = await self.store.listings.run_id(self.run)
        step = await self.store.evaluations.record_eval_metrics(run_id, version, metrics) if run_id else None
        logger.info(
            "evaluated %s on %d held-out tasks: pass@1 %.3f, pass@%d %.3f (learner step %s)",
            policy_label(version, self.policy),
            row["tasks"],
            row["pass_at_1"] or 0.0,
            row["k"],
            row["pass_at_k"] or 0.0,
            step,
        )
        self.evaluated = (self.evaluated or set()) | {version}
        self.results[version] = metrics
        return metrics

    async def _evaluated_versions(self) -> set[int]:
        run_id = await self.store.listings.run_id(eval_run_name(self.run))
        if run_id is None:
            return set()
        cells = await self.store.evaluations.pinned_task_counts(run_id)
        return {cell.version for cell in cells if cell.version == 0 or cell.policy == self.policy}


class EvalThread:
    """`harnessrl train --config` with eval_every: a thread checking for due evaluations beside the learner."""

    def __init__(self, periodic: PeriodicEval, database_url: str, poll_s: float = 5.0):
        self.periodic, self.database_url, self.poll_s = periodic, database_url, poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="periodic-eval", daemon=True)

    def start(self) -> EvalThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=600)  # an evaluation in progress finishes (its rollouts end cleanly)

    def _main(self) -> None:
        asyncio.run(self._loop())

    async def _loop(self) -> None:
        self.periodic.store = Store.from_url(self.database_url)  # this thread's own event loop and engine
        try:
            while not self._stop.is_set():
                try:
                    await self.periodic.check()
                except Exception as exc:  # noqa: BLE001 - an evaluation failure never stops training
                    logger.warning("periodic evaluation failed: %s: %s", type(exc).__name__, exc)
                await asyncio.to_thread(self._stop.wait, self.poll_s)
        finally:
            await self.periodic.store.close()


async def held_out_results(store: Store, run: str) -> list:
    """Per version (``store.passk.PolicyResult``): an evaluation run's own pinned rollouts, else the
    held-out evaluations of a training run (``<run>-eval``); [] when there are none."""
    from store.passk import policy_results

    for name in (run, eval_run_name(run)):
        run_id = await store.listings.run_id(name)
        cells = await store.evaluations.pinned_task_counts(run_id) if run_id is not None else []
        if cells:
            return policy_results(cells)
    return []

"""The quickstart's held-out evaluations: the held-out split and, when given, the never-trained kind.

Each task set is a ``PeriodicEval`` of its own run (``<run>-eval``, ``<run>-unseen-eval``); the sets
are evaluated side by side, so one's last rollouts overlap the other's and the engine batches both.
"""

from __future__ import annotations

import asyncio

from contracts.gateway_client import GatewayClient
from harnesses.harness import Harness
from harnessrl.evaluation.periodic import EvalEvery, PeriodicEval, served_version
from harnessrl.training.quickstart_plan import QuickstartPlan, sandbox_spec, unseen_run
from store.policies import DEFAULT_POLICY
from store.store import Store

HeldOutSets = list[tuple[str, PeriodicEval]]  # (label shown, its evaluation)


async def current_version(client: GatewayClient, policy: str = DEFAULT_POLICY) -> int:
    """The version of ``policy`` the gateway serves now."""
    return await served_version(client, policy)


def held_out_sets(plan: QuickstartPlan, agent: Harness, gateway_url: str, admin_key: str, store: Store) -> HeldOutSets:
    """The plan's held-out task sets, each with its evaluation; [] when evaluations are off."""
    if not plan.eval_every:
        return []
    sets = [("held-out", plan.run, plan.eval_tasks)]
    if plan.unseen_tasks:
        sets.append(("unseen kind", unseen_run(plan.run), plan.unseen_tasks))
    evals = []
    for label, run, tasks in sets:
        settings = EvalEvery(
            every=plan.eval_every,
            tasks=tasks,
            harness=agent,
            k=plan.eval_k,
            concurrency=plan.concurrency,
            sandbox=plan.sandbox,
            sandbox_options=plan.sandbox_options,
            base_spec=sandbox_spec(),
            temperature=plan.agent.temperature,
            capture=plan.capture,
            policy=plan.policy,
        )
        evals.append((label, PeriodicEval(settings, run, gateway_url, admin_key, store)))
    return evals


async def evaluate_sets(
    evals: HeldOutSets, admin_key: str, final: bool = False, version: int | None = None
) -> list[tuple[str, dict]]:
    """The due evaluations, side by side: (label, eval_* metrics) of each set evaluated now.
    ``version``: that one, unless evaluated already; ``final``: the version current now, asked once for
    every set (a learner publishing meanwhile must not split them across versions); else each set's due one."""
    if final and evals:
        client = GatewayClient(evals[0][1].gateway_url, admin_key)
        try:
            version = await current_version(client, evals[0][1].policy)
        finally:
            await client.close()
    done = await asyncio.gather(*(_evaluate_one(periodic, version) for _, periodic in evals))
    return [(label, metrics) for (label, _), metrics in zip(evals, done, strict=True) if metrics is not None]


async def _evaluate_one(periodic: PeriodicEval, version: int | None) -> dict | None:
    """``version`` evaluated unless it was (None: the current one, if due); its metrics, or None."""
    if version is None:
        return await periodic.check()
    return None if version in (periodic.evaluated or set()) else await periodic.evaluate(version)


def eval_line(label: str, metrics: dict) -> str:
    """One evaluation as the quickstart prints it."""
    return (
        f"{label} eval of v{metrics['eval_version']} ({metrics['eval_tasks']} tasks, k={metrics['eval_k']}): "
        f"pass@1 {metrics['eval_pass_at_1']:.3f}, pass@k {metrics['eval_pass_at_k']:.3f}, "
        f"mean reward {metrics['eval_reward_mean']:.3f}"
    )

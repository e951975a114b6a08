"""`harnessrl run`: load tasks, harness and reward functions, then run with a live display."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.console import Console

from contracts.gateway_client import GatewayClient
from harnesses.budget import DEFAULT_WALL_FACTOR
from harnesses.datasets import Selection, load_selection
from harnesses.environments import Environments
from harnesses.interrupts import sigterm_cancels_this_task
from harnesses.judge import Judge, JudgeSettings
from harnesses.openenv.agent import with_environments
from harnesses.progress import RunProgress
from harnesses.registry import create_harness
from harnesses.reward_functions import load_reward_function
from harnesses.run_plan import RolloutResult, RunPlan
from harnesses.runner import Runner
from harnesses.slot_leases import DEFAULT_LEASE_S
from harnesses.task import unhonoured_warning
from sandboxes import Limits, SandboxSpec
from sandboxes.kinds import checked_options, sandbox_kind

SUMMARY_CAUSE_CHARS = 160  # of a failure's cause in the summary line


async def launch_run(
    tasks: str | Path,
    run: str,
    harness: str,
    group_size: int,
    concurrency: int,
    sandbox: str,
    gateway_url: str,
    admin_key: str | None,
    rewards: list[str],
    capture: str | None,
    memory_gib: float,
    wall_factor: float = DEFAULT_WALL_FACTOR,
    sampling: dict | None = None,
    allow_unisolated: bool = False,
    judge: JudgeSettings | None = None,
    selection: Selection | None = None,
    allow_internet: bool = False,
    teacher: str | None = None,
    worker: str = "",
    lease_s: float = DEFAULT_LEASE_S,
    sandbox_gateway: str | None = None,
    policy: str | None = None,
    sandbox_options: dict[str, object] | None = None,
) -> str:
    """Run (or resume, or join: several runners may share a run) ``run``; a one-line summary.

    ``sandbox_gateway``: the URL the sandboxes' bridges reach the gateway by [default: ``gateway_url``,
    this worker's own route to it, which works wherever the gateway runs; for a kind without a bridge,
    harbor:<type>, the gateway's public URL]; ``sandbox_options``: ``--sandbox-option`` pairs (Harbor's
    environment options); ``worker`` and ``lease_s``:
    this runner's id in the run's slot leases and their length (``harnesses.runner``); ``policy``: the
    policy the run trains and is served (``store.policies``).
    """
    kind = sandbox_kind(sandbox)
    options = await checked_options(kind, allow_unisolated, sandbox_options)
    limits = Limits(memory_bytes=int(memory_gib * 2**30), cpus=1.0)
    chosen = load_selection(tasks, selection or Selection())
    if (ignored := unhonoured_warning(chosen)) is not None:
        Console(stderr=True).print(ignored, markup=False, highlight=False)
    environments = Environments(allow_internet=allow_internet)
    for task in chosen:  # a task needing the internet is refused before anything runs
        environments.check(task)
    agent, reward_functions = with_environments(  # OpenEnv tasks: their tools and reward (harnesses/openenv/agent.py)
        chosen,
        create_harness(harness, sandbox),
        tuple(load_reward_function(spec) for spec in rewards),
        admin_key=admin_key,
    )
    plan = RunPlan(
        run=run,
        tasks=chosen,
        harness=agent,
        group_size=group_size,
        concurrency=concurrency,
        sandbox=sandbox,
        base_spec=SandboxSpec(limits=limits),
        rewards=reward_functions,
        capture=capture,
        wall_factor=wall_factor,
        sampling=sampling,
        sandbox_options=options,
        judge=Judge(judge) if judge else None,
        environments=environments,
        teacher=teacher,
        worker=worker,
        lease_s=lease_s,
        sandbox_gateway=sandbox_gateway or (gateway_url if kind.bridged else None),
        policy=policy,
    )
    gateway = GatewayClient(gateway_url, admin_key)
    try:
        if (warning := await context_warning(gateway, agent)) is not None:
            Console(stderr=True).print(warning, markup=False, highlight=False)
        runner = Runner(plan, gateway)
        remaining = await runner.remaining()  # other runners of the run may play some of these
        with RunProgress(remaining) as progress, sigterm_cancels_this_task():
            runner.on_start, runner.on_result = progress.started, progress.finished
            results = await runner.run()  # slots claimed with leases (several runners share a run)
    finally:
        await gateway.close()
    return summary_line(run, results)


def summary_line(run: str, results: list[RolloutResult]) -> str:
    """The run in one line: rollouts, finished and failed, mean reward, and the commonest failures."""
    finished = [r for r in results if r.status == "finished"]
    scored = [r.reward for r in finished if r.reward is not None]
    mean = sum(scored) / len(scored) if scored else float("nan")
    causes = Counter((r.error or "no reason given")[:SUMMARY_CAUSE_CHARS] for r in results if r.status == "failed")
    failures = "".join(f"; {n} failed: {cause}" for cause, n in causes.most_common(2))
    return (
        f"run {run!r}: {len(results)} rollouts this time ({len(finished)} finished, "
        f"{len(results) - len(finished)} failed), mean reward {mean:.3f}{failures}"
    )


async def context_warning(gateway: GatewayClient, harness) -> str | None:
    """A warning when the harness's first prompt will not fit the engine's context (None: it fits, or
    either size is unknown): every rollout would then end before its first answer."""
    needs = getattr(harness, "first_prompt_tokens", 0)
    served = (await gateway.policy()).get("max_model_len") if needs else None
    if not served or needs < served:
        return None
    return (
        f"warning: {harness.name}'s first prompt is about {needs:,} tokens (measured with SmolLM2's tokenizer), "
        f"longer than the engine's context of {served:,}: its rollouts will fail before a first answer. "
        f"Serve with --max-model-len above {needs:,} (within the model's maximum), or a model with a longer context."
    )

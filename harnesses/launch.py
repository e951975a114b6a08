"""`harnessrl run`: load tasks, harness and reward functions, then run with a live display."""

from __future__ import annotations

from pathlib import Path

from harnesses.budget import DEFAULT_WALL_FACTOR
from harnesses.datasets import Selection, load_selection
from harnesses.environments import Environments
from harnesses.gateway_client import GatewayClient
from harnesses.judge import Judge, JudgeSettings
from harnesses.openenv_agent import with_environments
from harnesses.progress import RunProgress
from harnesses.registry import create_harness
from harnesses.reward_functions import load_reward_function
from harnesses.runner import DEFAULT_LEASE_S, Runner, RunPlan
from sandboxes import Limits, SandboxSpec
from sandboxes.local import local_isolation


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
) -> str:
    """Run (or resume, or join: several runners may share a run) ``run``; a one-line summary.

    ``sandbox_gateway``: the URL the sandboxes' bridges reach the gateway by [default: ``gateway_url``,
    this worker's own route to it, which works wherever the gateway runs]; ``worker`` and ``lease_s``:
    this runner's id in the run's slot leases and their length (``harnesses.runner``).
    """
    if sandbox not in ("local", "docker"):
        raise ValueError(f"--sandbox must be local or docker, not {sandbox!r}")
    options = {"isolation": local_isolation(allow_unisolated)} if sandbox == "local" else {}
    limits = Limits(memory_bytes=int(memory_gib * 2**30), cpus=1.0)
    chosen = load_selection(tasks, selection or Selection())
    environments = Environments(allow_internet=allow_internet)
    for task in chosen:  # a task needing the internet is refused before anything runs
        environments.check(task)
    adapter, reward_functions = with_environments(  # OpenEnv tasks: their tools and reward (harnesses/openenv_agent.py)
        chosen,
        create_harness(harness, sandbox),
        tuple(load_reward_function(spec) for spec in rewards),
        admin_key=admin_key,
    )
    plan = RunPlan(
        run=run,
        tasks=chosen,
        harness=adapter,
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
        sandbox_gateway=sandbox_gateway or gateway_url,
    )
    gateway = GatewayClient(gateway_url, admin_key)
    try:
        runner = Runner(plan, gateway)
        remaining = await runner.remaining()  # other runners of the run may play some of these
        with RunProgress(remaining) as progress:
            runner.on_start, runner.on_result = progress.started, progress.finished
            results = await runner.run()  # slots claimed with leases (several runners share a run)
    finally:
        await gateway.close()
    finished = [r for r in results if r.status == "finished"]
    scored = [r.reward for r in finished if r.reward is not None]
    mean = sum(scored) / len(scored) if scored else float("nan")
    return (
        f"run {run!r}: {len(results)} rollouts this time ({len(finished)} finished, "
        f"{len(results) - len(finished)} failed), mean reward {mean:.3f}"
    )

"""`harnessrl run`: a run's config (harnessrl/config/jobs.py) made a plan (its tasks, harness and reward
functions loaded), then played with a terminal display."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from rich.console import Console

from contracts.gateway_client import GatewayClient
from harnesses.datasets import load_selection
from harnesses.environments import Environments
from harnesses.grading.judge import Judge
from harnesses.grading.reward_functions import RewardFunction, load_reward_function
from harnesses.harness import Harness
from harnesses.openenv.agent import with_environments
from harnesses.registry import create_harness
from harnesses.task import Task, unhonoured_warning
from rollouts.interrupts import sigterm_cancels_this_task
from rollouts.progress import RunProgress
from rollouts.run_plan import RolloutResult, RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import checked_options
from store.capture_modes import TEACHER_CAPTURE

if TYPE_CHECKING:  # the config is read, never imported: harnessrl builds on harnesses, not the reverse
    from harnessrl.config.jobs import RunConfig

SUMMARY_CAUSE_CHARS = 160  # of a failure's cause in the summary line


async def launch_run(
    config: RunConfig, gateway_url: str, admin_key: str | None, on_ready: Callable[[], None] | None = None
) -> str:
    """Run (or resume, or join: several runners may share a run) ``config.run``; a one-line summary.

    ``gateway_url``: the gateway serving the run (the config's, or a teacher's); the sandboxes' bridges reach
    it there unless ``config.sandbox.gateway`` names another URL (a kind without a bridge, harbor:<type>,
    uses the gateway's public URL). ``on_ready``: called once the checks passed, before any rollout.
    """
    kind = config.sandbox.kind  # parsed when the config was read
    options = await checked_options(kind, config.sandbox.allow_unisolated, config.sandbox.options)
    chosen = load_selection(config.tasks.source, config.tasks.selection())
    if (ignored := unhonoured_warning(chosen)) is not None:
        Console(stderr=True).print(ignored, markup=False, highlight=False)
    environments = Environments(allow_internet=config.sandbox.allow_internet)
    for task in chosen:  # a task needing the internet is refused before anything runs
        environments.check(task)
    agent, reward_functions = with_environments(  # OpenEnv tasks: their tools and reward (harnesses/openenv/agent.py)
        chosen,
        create_harness(config.harness, config.sandbox.kind),
        tuple(load_reward_function(spec) for spec in config.rewards),
        admin_key=admin_key,
    )
    plan = replace(
        run_plan(config, chosen, agent, reward_functions),
        sandbox_options=options,
        environments=environments,
        sandbox_gateway=config.sandbox.gateway or (gateway_url if kind.bridged else None),
    )
    if on_ready is not None:
        on_ready()
    return outcome(config.run, await _play(plan, gateway_url, admin_key))


def run_plan(config: RunConfig, tasks: list[Task], agent: Harness, rewards: tuple[RewardFunction, ...]) -> RunPlan:
    """The plan ``config`` describes, on the tasks, agent and rewards loaded for it."""
    judge = config.judge.settings()
    return RunPlan(
        run=config.run,
        tasks=tasks,
        harness=agent,
        group_size=config.group_size,
        concurrency=config.concurrency,
        sandbox=config.sandbox.kind,
        base_spec=config.sandbox.spec(),
        rewards=rewards,
        capture=TEACHER_CAPTURE if config.teacher.model else config.capture,
        wall_factor=config.sandbox.wall_factor,
        sampling=config.sampling.request(),
        judge=Judge(judge) if judge else None,
        teacher=config.teacher.model,
        worker=config.workers.worker_id,
        lease_s=config.workers.lease_s,
        policy=config.policy,
    )


async def _play(plan: RunPlan, gateway_url: str, admin_key: str | None) -> list[RolloutResult]:
    """The plan's slots played under a terminal display (slots claimed with leases: several runners share a run)."""
    gateway = GatewayClient(gateway_url, admin_key)
    try:
        if (warning := await context_warning(gateway, plan.harness)) is not None:
            Console(stderr=True).print(warning, markup=False, highlight=False)
        runner = Runner(plan, gateway)
        remaining = await runner.remaining()  # other runners of the run may play some of these
        with RunProgress(remaining) as progress, sigterm_cancels_this_task():
            runner.on_start, runner.on_result = progress.started, progress.finished
            return await runner.run()
    finally:
        await gateway.close()


class EveryRolloutFailed(RuntimeError):
    """The run played rollouts and none finished: `harnessrl run` exits non-zero, naming the first error."""


def outcome(run: str, results: list[RolloutResult]) -> str:
    """The summary line of a run in which some rollout finished (or none was left to play); else
    EveryRolloutFailed with the summary and the first rollout's error (a sandbox that never starts, an
    unreachable engine: the cause is usually the same for all)."""
    line = summary_line(run, results)
    if results and all(r.status != "finished" for r in results):
        first = next((r.error for r in results if r.error), "no reason given")
        raise EveryRolloutFailed(f"{line}\nevery rollout failed; the first: {first}")
    return line


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

"""The rollout runner: G rollouts per task, C at a time, each in its own sandbox, verified and scored.

A rollout's identity within a run is (round, task, index); re-running the same command skips the ones
that ended and replaces the ones an interrupted runner left running. Every rollout ends as
`finished` (with its rewards) or `failed` (with the reason); the run goes on either way.

With a judge (``harnesses.judge``), finished rollouts also get the reward component ``judge``: per
rollout as each one finishes, or per group once the task's rollouts of this pass have all been played
(they end together, so the group becomes ready with every score in place).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from harnesses.adapter import AgentOutcome, HarnessAdapter, RolloutTarget
from harnesses.budget import DEFAULT_WALL_FACTOR, AgentBudget, BudgetExceeded, run_within
from harnesses.environments import Environments
from harnesses.gateway_client import GatewayClient
from harnesses.judge import JUDGE_COMPONENT, Judge, Judgement
from harnesses.reward_functions import RewardFunction
from harnesses.rubric import Trajectory
from harnesses.task import Task
from harnesses.verify import Verdict, verify
from sandboxes import SandboxSpec, create_sandbox

ENDED = ("finished", "failed", "cancelled")
INTERRUPTED = "interrupted: the runner stopped before this rollout ended; rerun replaces it"


@dataclass(frozen=True)
class RunPlan:
    run: str
    tasks: list[Task]
    harness: HarnessAdapter
    group_size: int  # G
    concurrency: int  # rollouts at once
    sandbox: str  # "docker" | "local"
    base_spec: SandboxSpec = field(default_factory=SandboxSpec)  # limits and options every sandbox shares
    rewards: tuple[RewardFunction, ...] = ()
    capture: str | None = None  # the run's capture mode when the runner creates it
    sampling: dict | None = None  # the run's {"temperature", "top_p"} when the runner creates it
    sandbox_options: dict = field(default_factory=dict)  # e.g. {"isolation": "bwrap"} for local
    round: int = 0  # training rounds sample every task again, each round into new groups
    wall_factor: float = DEFAULT_WALL_FACTOR  # wall-clock ceiling per rollout, x the task's agent budget
    environments: Environments | None = None  # Harbor task images (built and cached); None: a new one
    judge: Judge | None = None  # an LLM judge adding the reward component "judge"
    teacher: str | None = None  # the external model serving this run (harnessrl.teacher), kept in each rollout's meta

    @property
    def group(self) -> str:
        return f"r{self.round}"


@dataclass(frozen=True)
class RolloutResult:
    task: str
    index: int
    rollout_id: int
    status: str  # finished | failed
    reward: float | None
    error: str | None = None


@dataclass(frozen=True)
class Played:
    """A rollout whose agent and verifier ran, not yet ended (a group judge waits for its group)."""

    task: Task
    index: int
    rollout: dict
    status: str
    error: str | None
    rewards: dict
    verdict: Verdict | None = None
    outcome: AgentOutcome | None = None


class Runner:
    def __init__(self, plan: RunPlan, gateway: GatewayClient,
                 on_result: Callable[[RolloutResult], None] = lambda result: None,
                 on_start: Callable[[str, int], None] = lambda task, index: None):
        self.plan, self.gateway = plan, gateway
        self.on_result, self.on_start = on_result, on_start
        self.environments = plan.environments or Environments()

    async def pending(self) -> list[tuple[Task, int]]:
        """(task, index) pairs still to run; rollouts left running by an interrupted runner are cancelled."""
        ended, interrupted = set(), []
        for rollout in await self.gateway.rollouts(self.plan.run):
            if rollout["meta"].get("round", 0) != self.plan.round:
                continue
            key = (rollout["task"], rollout["meta"].get("index"))
            if rollout["status"] not in ENDED:
                interrupted.append(rollout["id"])
            elif rollout["error"] != INTERRUPTED:
                ended.add(key)
        for rollout_id in interrupted:
            # cancelled, not failed: its place in the group goes to the replacement
            await self.gateway.finish(rollout_id, "cancelled", INTERRUPTED, {})
        return [(task, index) for task in self.plan.tasks for index in range(self.plan.group_size)
                if (task.name, index) not in ended]

    async def run(self, pending: list[tuple[Task, int]] | None = None) -> list[RolloutResult]:
        """Run what is pending (``pending()`` when not given) and return each rollout's result."""
        limit = asyncio.Semaphore(self.plan.concurrency)

        async def one(task: Task, index: int) -> RolloutResult:
            async with limit:
                self.on_start(task.name, index)
                result = await self.run_one(task, index)
                self.on_result(result)
                return result

        jobs = pending if pending is not None else await self.pending()
        if self.plan.judge is not None and self.plan.judge.mode == "group":
            return await self._run_groups(jobs, limit)
        return list(await asyncio.gather(*[one(task, index) for task, index in jobs]))

    async def run_one(self, task: Task, index: int) -> RolloutResult:
        played = await self._play(task, index)
        judgement = await self._judge_one(played) if self.plan.judge is not None else None
        return await self._end(played, judgement)

    async def _run_groups(self, jobs: list[tuple[Task, int]], limit: asyncio.Semaphore) -> list[RolloutResult]:
        """Each task's rollouts played (C at a time), judged together, then ended together."""
        by_task: dict[str, tuple[Task, list[int]]] = {}
        for task, index in jobs:
            by_task.setdefault(task.name, (task, []))[1].append(index)

        async def play(task: Task, index: int) -> Played:
            async with limit:
                self.on_start(task.name, index)
                return await self._play(task, index)

        async def group(task: Task, indices: list[int]) -> list[RolloutResult]:
            played = await asyncio.gather(*[play(task, index) for index in indices])
            judgements = await self._judge_group(list(played))
            results = []
            for one, judgement in zip(played, judgements):
                results.append(result := await self._end(one, judgement))
                self.on_result(result)
            return results

        groups = await asyncio.gather(*[group(task, indices) for task, indices in by_task.values()])
        return [result for results in groups for result in results]

    async def _play(self, task: Task, index: int) -> Played:
        plan = self.plan
        meta = {"harness": plan.harness.name, "round": plan.round, "index": index,
                "side_call_patterns": plan.harness.side_call_patterns}
        if plan.teacher:
            meta["teacher"] = plan.teacher
        rollout = await self.gateway.create_rollout(plan.run, task.name, plan.group, plan.group_size, meta,
                                                    plan.capture, plan.sampling)
        try:
            return await self._attempt(task, index, rollout)
        except Exception as exc:  # a crashed sandbox or agent fails this rollout, not the run
            return Played(task, index, rollout, "failed", f"{type(exc).__name__}: {exc}", {})

    async def _end(self, played: Played, judgement: Judgement | None) -> RolloutResult:
        rewards, details = dict(played.rewards), {}
        if judgement is not None:
            rewards[JUDGE_COMPONENT], details[JUDGE_COMPONENT] = judgement.score, judgement.detail()
        rollout_id = played.rollout["id"]
        try:
            view = await self.gateway.finish(rollout_id, played.status, played.error, rewards, details)
        except RuntimeError as exc:  # the gateway went away: report it, leave the rollout to a rerun
            return RolloutResult(played.task.name, played.index, rollout_id, "failed", None,
                                 f"could not end the rollout: {exc}")
        return RolloutResult(played.task.name, played.index, rollout_id, played.status, view["reward"], played.error)

    async def _judge_one(self, played: Played) -> Judgement | None:
        if played.status != "finished":
            return None
        try:
            return await self.plan.judge.rollout(await self._trajectory(played))
        except Exception as exc:  # noqa: BLE001 - e.g. the conversation could not be read: abstain
            return Judgement(None, f"judge abstained: {type(exc).__name__}: {exc}", self.plan.judge.settings.model,
                             abstained=True)

    async def _judge_group(self, played: list[Played]) -> list[Judgement | None]:
        """One group verdict over the finished rollouts; None for the others (they have no result)."""
        finished = [p for p in played if p.status == "finished"]
        try:
            judgements = await self.plan.judge.group([await self._trajectory(p) for p in finished])
        except Exception as exc:  # noqa: BLE001
            abstain = Judgement(None, f"judge abstained: {type(exc).__name__}: {exc}",
                                self.plan.judge.settings.model, shared_by=len(finished), abstained=True)
            judgements = [abstain] * len(finished)
        by_rollout = {p.rollout["id"]: j for p, j in zip(finished, judgements)}
        return [by_rollout.get(p.rollout["id"]) for p in played]

    async def _trajectory(self, played: Played) -> Trajectory:
        messages = await self.gateway.conversation(played.rollout["id"])
        verdict = played.verdict
        return Trajectory(task=played.task.instruction, messages=tuple(messages),
                          final_answer=played.outcome.final_text if played.outcome else "",
                          verifier_reward=verdict.reward if verdict else None,
                          verifier_error=verdict.error if verdict else None)

    async def _attempt(self, task: Task, index: int, rollout: dict) -> Played:
        plan = self.plan
        target = RolloutTarget(rollout["base_url"], rollout["token"])
        base = replace(plan.base_spec, gateway_url=rollout["base_url"], name=f"{task.name}-{index}"[:40])
        base = await self.environments.sandbox_spec(task, plan.harness.name, plan.sandbox, base)
        spec = plan.harness.sandbox_spec(task, target, base)
        async with await create_sandbox(plan.sandbox, spec, **plan.sandbox_options) as sandbox:
            budget = AgentBudget.for_timeout(task.agent_timeout_s, plan.wall_factor)
            try:
                outcome = await run_within(budget, plan.harness.run(sandbox, task, target, budget.ceiling_s),
                                           lambda: self._engine_seconds(rollout["id"]))
            except BudgetExceeded as exc:
                return Played(task, index, rollout, "failed", str(exc), {})
            if outcome.timed_out:
                return Played(task, index, rollout, "failed", budget.ceiling_message(budget.ceiling_s), {})
            await sandbox.put_file("/logs/agent/final.txt", outcome.final_text.encode())
            verdict = await verify(sandbox, task)
        rewards = verdict.components
        rewards.update(await self._reward_functions(task, rollout, verdict, outcome))
        return Played(task, index, rollout, "finished", verdict.error, rewards, verdict, outcome)

    async def _engine_seconds(self, rollout_id: int) -> float:
        return float((await self.gateway.rollout(rollout_id)).get("engine_s", 0.0))

    async def _reward_functions(self, task: Task, rollout: dict, verdict: Verdict,
                                outcome: AgentOutcome) -> dict[str, float | None]:
        if not self.plan.rewards:
            return {}
        view = await self.gateway.rollout(rollout["id"])
        scores = {}
        for function in self.plan.rewards:
            try:
                scores[function.name] = await function(task=task, rollout=view, verdict=verdict, outcome=outcome)
            except Exception:  # a broken reward function abstains instead of failing the rollout
                scores[function.name] = None
        return scores

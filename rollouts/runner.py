"""The rollout runner: G rollouts per task, C at a time, each in its own sandbox, verified and scored.

A rollout's identity within a run is (round, task, index), a *slot*. Several runners (processes, hosts)
may work on one run at once: each slot is claimed with a lease in the gateway's store
(``store.leases``, through ``/admin/leases``), renewed every third of ``lease_s`` while its rollout
runs, and marked done once the rollout ended. A runner that dies stops renewing; once its leases expire,
another runner (or the same command run again) claims those slots, which cancels the rollouts left
running there, and plays them again. A runner only ends rollouts whose lease it holds: one whose lease
was taken over is stopped, not ended. Every rollout ends as `finished` (with its rewards) or `failed`
(with the reason); the run goes on either way.

With a judge (``harnesses.grading.judge``), finished rollouts also get the reward component ``judge``: per
rollout as each one finishes, or per group once the task's rollouts of this pass have all been played
(they end together, so the group becomes ready with every score in place).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from contracts.gateway_client import GatewayClient, rebased
from harnesses.environments import Environments
from harnesses.grading.grade import final_answer, grade
from harnesses.grading.judge import JUDGE_COMPONENT, Judgement
from harnesses.grading.rubric import Trajectory
from harnesses.grading.verify import VERIFIER, Verdict
from harnesses.harness import AgentOutcome, RolloutTarget
from harnesses.task import Task
from rollouts.budget import AgentBudget, BudgetExceeded, run_within
from rollouts.run_plan import Admission, Played, RolloutResult, RunPlan
from rollouts.slot_leases import INTERRUPTED, LeaseLost, SlotLeases, default_worker_id
from sandboxes import create_sandbox
from sandboxes.bridge_limits import raise_open_files_limit
from sandboxes.urls import public_url
from store.records import ENDED, SCORED, RolloutStatus

PACE_POLL_S = 1.0  # how often a held-back runner asks its pace again


class Runner:
    def __init__(
        self,
        plan: RunPlan,
        gateway: GatewayClient,
        on_result: Callable[[RolloutResult], None] = lambda result: None,
        on_start: Callable[[str, int], None] = lambda task, index: None,
    ):
        self.plan, self.gateway = plan, gateway
        self.on_result, self.on_start = on_result, on_start
        self.environments = plan.environments or Environments()
        self.worker = plan.worker or default_worker_id()
        self.leases = SlotLeases(gateway, self.worker, plan.lease_s)
        raise_open_files_limit()  # the sandboxes' bridges serve every agent connection in this process

    async def pending(self) -> list[tuple[Task, int]]:
        """(task, index) slots to play for a caller that owns the run alone (``run(pending)``, evaluation):
        rollouts an interrupted earlier runner left running are cancelled. Runners sharing a run never
        call this: ``run()`` claims slots with leases and cancels only rollouts whose lease expired."""
        ended, interrupted = set(), []
        for rollout in await self.gateway.rollouts(self.plan.run):
            if rollout["meta"].get("round", 0) != self.plan.round:
                continue
            key = (rollout["task"], rollout["meta"].get("index"))
            if rollout["status"] not in ENDED:
                interrupted.append(rollout["id"])
            elif rollout["status"] != RolloutStatus.CANCELLED:
                ended.add(key)
        for rollout_id in interrupted:
            # cancelled, not failed: its place in the group goes to the replacement
            await self.gateway.end_rollout(rollout_id, RolloutStatus.CANCELLED, INTERRUPTED, {})
        return [
            (task, index)
            for task in self.plan.tasks
            for index in range(self.plan.group_size)
            if (task.name, index) not in ended
        ]

    async def remaining(self) -> int:
        """Slots of this round without an ended rollout (any runner's); reads only."""
        ended = {
            (r["task"], r["meta"].get("index"))
            for r in await self.gateway.rollouts(self.plan.run)
            if r["meta"].get("round", 0) == self.plan.round and r["status"] in SCORED
        }
        return sum((task.name, index) not in ended for task in self.plan.tasks for index in range(self.plan.group_size))

    async def run(self, pending: list[tuple[Task, int]] | None = None) -> list[RolloutResult]:
        """Claim and run the round's slots until none is left to any runner, and return this runner's
        results; with ``pending``, run just those (no leases: the caller owns them)."""
        if pending is None:
            return await self._run_leased()
        limit = asyncio.Semaphore(self.plan.concurrency)
        if self.plan.judge is not None and self.plan.judge.mode == "group":
            return await self._run_groups(pending, limit)
        return list(await asyncio.gather(*[self._one(task, index, limit) for task, index in pending]))

    async def _one(self, task: Task, index: int, limit: asyncio.Semaphore, lease: int | None = None) -> RolloutResult:
        async with limit:
            self.on_start(task.name, index)
            result = await self.run_one(task, index, lease)
            self.on_result(result)
            return result

    async def _run_leased(self) -> list[RolloutResult]:
        """C slots at a time: claim what is free, run it, renew the leases held, mark each slot done;
        when others hold the rest, wait for them to end or for their leases to expire. With a pace, a
        claim begins new groups only when it says GO; held back, the runner still finishes those begun."""
        plan, by_name = self.plan, {task.name: task for task in self.plan.tasks}
        limit, poll_s = asyncio.Semaphore(plan.concurrency), plan.lease_s / 3
        running: dict[int, asyncio.Task] = {}
        results: list[RolloutResult] = []
        begun: set[str] = set()  # tasks this runner claimed slots of
        heartbeat = asyncio.create_task(self.leases.heartbeat())
        try:
            while True:
                batch = plan.concurrency - len(self.leases.held)  # slots held (not ended) count against C
                if self.plan.judge is not None and self.plan.judge.mode == "group":
                    batch = 0 if running else max(plan.concurrency, plan.group_size)  # whole groups, together
                if batch > 0 or not running:
                    admission = await self._admission()
                    claim = await self._claim(batch, None if admission is Admission.GO else sorted(begun))
                    leases = [(by_name[x["task"]], x["index"], x["id"]) for x in claim["leases"]]
                    begun.update(task.name for task, _, _ in leases)
                    if leases:
                        running[leases[0][2]] = asyncio.create_task(self._run_claimed(leases, limit))
                    if not running:
                        if claim["remaining"] == 0 and admission is not Admission.HOLD:
                            return results
                        # the rest is held by other runners, or the pace holds new groups back
                        await asyncio.sleep(poll_s if admission is Admission.GO else PACE_POLL_S)
                        continue
                await asyncio.wait(running.values(), timeout=poll_s, return_when=asyncio.FIRST_COMPLETED)
                for key, job in list(running.items()):
                    if job.done():
                        del running[key]
                        if not job.cancelled():
                            results.extend(job.result())
        finally:
            heartbeat.cancel()
            await self.leases.hand_back(running)

    async def _admission(self) -> Admission:
        return Admission.GO if self.plan.pace is None else await self.plan.pace()

    async def _claim(self, limit: int, tasks: list[str] | None = None) -> dict:
        """Up to ``limit`` slots of ``tasks`` (None: the round's), and how many of theirs are not done."""
        plan = self.plan
        if tasks == []:
            return {"leases": [], "remaining": 0}
        tasks = [t.name for t in plan.tasks] if tasks is None else tasks
        return await self.leases.claim(plan.run, plan.round, plan.group, tasks, plan.group_size, limit)

    async def _run_claimed(self, leases: list[tuple[Task, int, int]], limit: asyncio.Semaphore) -> list[RolloutResult]:
        if self.plan.judge is not None and self.plan.judge.mode == "group":
            return await self._run_groups(
                [(task, index) for task, index, _ in leases],
                limit,
                {(task.name, index): lease for task, index, lease in leases},
            )
        return list(
            await asyncio.gather(*[self._leased_one(task, index, lease, limit) for task, index, lease in leases])
        )

    async def _leased_one(self, task: Task, index: int, lease: int, limit: asyncio.Semaphore) -> RolloutResult:
        job = self.leases.jobs[lease] = asyncio.create_task(self._one(task, index, limit, lease))
        try:
            return await job
        except asyncio.CancelledError:
            if not self.leases.is_lost(lease) or asyncio.current_task().cancelling():
                raise
            return RolloutResult(
                task.name,
                index,
                0,
                RolloutStatus.CANCELLED,
                None,
                f"slot lease {lease} was taken over by another runner (this one's lease expired): stopped",
            )
        finally:
            self.leases.jobs.pop(lease, None)

    async def run_one(self, task: Task, index: int, lease: int | None = None) -> RolloutResult:
        try:
            played = await self._play(task, index, lease)
        except LeaseLost as exc:  # before its rollout was created
            return RolloutResult(task.name, index, 0, RolloutStatus.CANCELLED, None, str(exc))
        judgement = await self._judge_one(played) if self.plan.judge is not None else None
        return await self._end(played, judgement, lease)

    async def _run_groups(
        self, jobs: list[tuple[Task, int]], limit: asyncio.Semaphore, leases: dict[tuple[str, int], int] | None = None
    ) -> list[RolloutResult]:
        """Each task's rollouts played (C at a time), judged together, then ended together."""
        leases = leases or {}
        by_task: dict[str, tuple[Task, list[int]]] = {}
        for task, index in jobs:
            by_task.setdefault(task.name, (task, []))[1].append(index)

        async def play(task: Task, index: int) -> Played:
            async with limit:
                self.on_start(task.name, index)
                return await self._play(task, index, leases.get((task.name, index)))

        async def group(task: Task, indices: list[int]) -> list[RolloutResult]:
            played = await asyncio.gather(*[play(task, index) for index in indices])
            judgements = await self._judge_group(list(played))
            results = []
            for one, judgement in zip(played, judgements):
                results.append(result := await self._end(one, judgement, leases.get((one.task.name, one.index))))
                self.on_result(result)
            return results

        groups = await asyncio.gather(*[group(task, indices) for task, indices in by_task.values()])
        return [result for results in groups for result in results]

    async def _play(self, task: Task, index: int, lease: int | None = None) -> Played:
        plan = self.plan
        meta = {
            "harness": plan.harness.name,
            "round": plan.round,
            "index": index,
            "side_call_patterns": plan.harness.side_call_patterns,
        }
        if plan.teacher:
            meta["teacher"] = plan.teacher
        if lease is not None:
            meta["worker"] = self.worker
            await self.leases.still_held(lease)  # a full lease ahead: no other runner takes the slot meanwhile
        rollout = await self.gateway.create_rollout(
            plan.run, task.name, plan.group, plan.group_size, meta, plan.capture, plan.sampling, plan.policy
        )
        if lease is not None:
            self.leases.started(lease, rollout["id"])
        try:
            return await self._attempt(task, index, rollout)
        except asyncio.CancelledError:  # stopped (Ctrl-C, SIGTERM): its sandbox is closed, its rollout cancelled
            if lease is None or not self.leases.is_lost(lease):  # a lost lease's new holder cancels it itself
                await self._end_interrupted(rollout["id"])
            raise
        except Exception as exc:  # a crashed sandbox or agent fails this rollout, not the run
            return Played(task, index, rollout, RolloutStatus.FAILED, await self._crash_cause(rollout["id"], exc), {})

    async def _end(self, played: Played, judgement: Judgement | None, lease: int | None = None) -> RolloutResult:
        rewards, details = dict(played.rewards), {}
        if played.verdict is not None:  # its metrics and log, kept with the rollout
            details[VERIFIER] = played.verdict.detail()
        if judgement is not None:
            rewards[JUDGE_COMPONENT], details[JUDGE_COMPONENT] = judgement.score, judgement.detail()
        rollout_id = played.rollout["id"]
        try:
            if lease is not None:
                await self.leases.still_held(lease)  # taken over: the new holder cancelled this rollout
            view = await self.gateway.end_rollout(
                rollout_id, played.status, played.error, rewards, details, played.outcome
            )
            if lease is not None:
                await self.leases.done(lease, rollout_id)
        except LeaseLost as exc:
            return RolloutResult(played.task.name, played.index, rollout_id, RolloutStatus.CANCELLED, None, str(exc))
        except RuntimeError as exc:  # the gateway went away or refused: report it, leave the slot to a replay
            if lease is not None:
                await self.leases.give_up(lease)
            return RolloutResult(
                played.task.name,
                played.index,
                rollout_id,
                RolloutStatus.FAILED,
                None,
                f"could not end the rollout: {exc}",
            )
        return RolloutResult(
            played.task.name,
            played.index,
            rollout_id,
            view["status"],
            view["reward"],
            played.error if view["status"] == played.status else view["error"],
        )

    async def _judge_one(self, played: Played) -> Judgement | None:
        if played.status != RolloutStatus.FINISHED:
            return None
        try:
            return await self.plan.judge.rollout(await self._trajectory(played))
        except Exception as exc:  # noqa: BLE001 - e.g. the conversation could not be read: abstain
            return Judgement(
                None, f"judge abstained: {type(exc).__name__}: {exc}", self.plan.judge.settings.model, abstained=True
            )

    async def _judge_group(self, played: list[Played]) -> list[Judgement | None]:
        """One group verdict over the finished rollouts; None for the others (they have no result)."""
        finished = [p for p in played if p.status == RolloutStatus.FINISHED]
        try:
            judgements = await self.plan.judge.group([await self._trajectory(p) for p in finished])
        except Exception as exc:  # noqa: BLE001
            abstain = Judgement(
                None,
                f"judge abstained: {type(exc).__name__}: {exc}",
                self.plan.judge.settings.model,
                shared_by=len(finished),
                abstained=True,
            )
            judgements = [abstain] * len(finished)
        by_rollout = {p.rollout["id"]: j for p, j in zip(finished, judgements)}
        return [by_rollout.get(p.rollout["id"]) for p in played]

    async def _trajectory(self, played: Played) -> Trajectory:
        messages = await self.gateway.conversation(played.rollout["id"])
        verdict = played.verdict
        return Trajectory(
            task=played.task.instruction,
            messages=tuple(messages),
            final_answer=played.outcome.final_text if played.outcome else "",
            verifier_reward=verdict.reward if verdict else None,
            verifier_error=verdict.error if verdict else None,
        )

    async def _attempt(self, task: Task, index: int, rollout: dict) -> Played:
        plan = self.plan
        base_url = rebased(rollout["base_url"], plan.sandbox_gateway)  # the bridge connects to its host:port
        if not plan.sandbox.bridged:
            base_url = public_url(base_url, plan.sandbox.name)  # given to the sandbox as is
        target = RolloutTarget(base_url, rollout["token"])
        base = replace(plan.base_spec, gateway_url=base_url, name=f"{task.name}-{index}"[:40])
        base = await self.environments.sandbox_spec(task, plan.harness.name, plan.sandbox, base)
        spec = self.environments.with_plain_image(plan.harness.sandbox_spec(task, target, base), plan.sandbox)
        async with await create_sandbox(plan.sandbox, spec, **plan.sandbox_options) as sandbox:
            budget = AgentBudget.for_timeout(task.agent_timeout_s, plan.wall_factor)
            try:
                outcome = await run_within(
                    budget,
                    plan.harness.run(sandbox, task, target, budget.ceiling_s),
                    lambda: self._engine_seconds(rollout["id"]),
                )
            except BudgetExceeded as exc:
                return Played(task, index, rollout, RolloutStatus.FAILED, str(exc), {})
            unanswered = await self._unanswered(rollout["id"])
            if outcome.timed_out:
                message = "; ".join(filter(None, (budget.ceiling_message(budget.ceiling_s), unanswered)))
                return Played(task, index, rollout, RolloutStatus.FAILED, message, {}, outcome=outcome)
            if unanswered:  # an infrastructure failure, not a zero reward: never trained on
                return Played(task, index, rollout, RolloutStatus.FAILED, unanswered, {}, outcome=outcome)
            # Graded in a fresh sandbox holding only the agent's work, where the task allows (grading.py).
            grading = await self.environments.grading_spec(task, plan.sandbox, spec)
            final = await final_answer(sandbox, outcome.final_text)
            verdict = await grade(plan.sandbox, sandbox, task, grading, plan.sandbox_options, final)
        rewards = verdict.components
        rewards.update(await self._reward_functions(task, rollout, verdict, outcome))
        return Played(task, index, rollout, RolloutStatus.FINISHED, verdict.error, rewards, verdict, outcome)

    async def _end_interrupted(self, rollout_id: int) -> None:
        try:
            await self.gateway.end_rollout(rollout_id, RolloutStatus.CANCELLED, INTERRUPTED, {})
        except RuntimeError:  # the gateway is away: a rerun (or the lease's expiry) cancels it later
            pass

    async def _crash_cause(self, rollout_id: int, exc: Exception) -> str:
        """Why an agent (or its sandbox) crashed: the model never answering it, when that is so."""
        try:
            unanswered = await self._unanswered(rollout_id)
        except RuntimeError:  # the gateway is away too: the crash says what is known
            unanswered = None
        return unanswered or f"{type(exc).__name__}: {exc}"

    async def _unanswered(self, rollout_id: int) -> str | None:
        """Why the model never answered the agent (every main-loop call refused, e.g. its first prompt is
        longer than the engine's context: gateway.request.refusals), or None."""
        view = await self.gateway.rollout(rollout_id)
        if view.get("refused_calls") and not view.get("answered_calls"):
            return f"no answer from the model: {view['last_refusal']} ({view['refused_calls']} main-loop calls refused)"
        return None

    async def _engine_seconds(self, rollout_id: int) -> float:
        return float((await self.gateway.rollout(rollout_id)).get("engine_s", 0.0))

    async def _reward_functions(
        self, task: Task, rollout: dict, verdict: Verdict, outcome: AgentOutcome
    ) -> dict[str, float | None]:
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

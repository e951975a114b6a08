"""Engine-paced agent budgets: the agent is charged its own time, the engine's time is the engine's."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from rollouts.budget import AgentBudget, BudgetExceeded, run_within
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.fake_tokens import FakeReply


def test_engine_time_is_not_charged_to_the_agent():
    budget = AgentBudget(agent_s=120, ceiling_s=1200)
    assert budget.overrun(wall_s=500, engine_s=450) is None


def test_overrun_says_which_limit_and_by_how_much():
    budget = AgentBudget(agent_s=120, ceiling_s=1200)
    reason = budget.overrun(wall_s=300, engine_s=150)
    assert reason.startswith("agent timed out: 150 s of agent time, 30 s over the task's 120 s budget")
    assert "300 s wall, 150 s in model calls" in reason
    ceiling = budget.overrun(wall_s=1200, engine_s=1150)
    assert "1200 s ceiling" in ceiling and "--wall-factor" in ceiling


def test_ceiling_follows_the_wall_factor_and_never_undercuts_the_budget():
    assert AgentBudget.for_timeout(120, 10).ceiling_s == 1200
    assert AgentBudget.for_timeout(120, 0.5).ceiling_s == 120


async def test_run_within_returns_the_work_when_the_engine_took_the_time():
    budget = AgentBudget(agent_s=0.2, ceiling_s=60.0, poll_s=0.02)  # the ceiling: far off, however slow
    started = time.monotonic()

    async def engine_seconds() -> float:  # every second so far was spent in the engine
        return time.monotonic() - started

    async def agent() -> str:
        await asyncio.sleep(0.5)
        return "done"

    assert await run_within(budget, agent(), engine_seconds) == "done"


async def test_run_within_cancels_an_agent_over_its_own_budget():
    budget = AgentBudget(agent_s=0.1, ceiling_s=60.0, poll_s=0.02)
    cancelled = asyncio.Event()

    async def agent() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def no_engine_time() -> float:
        return 0.0

    with pytest.raises(BudgetExceeded, match="over the task's 0 s budget"):
        await run_within(budget, agent(), no_engine_time)
    assert cancelled.is_set()


async def test_a_gateway_that_cannot_answer_keeps_the_last_engine_time():
    budget = AgentBudget(agent_s=0.05, ceiling_s=0.3, poll_s=0.02)

    async def failing() -> float:
        raise RuntimeError("gateway away")

    with pytest.raises(BudgetExceeded):
        await run_within(budget, asyncio.sleep(10), failing)


AGENT_S = 10.0
needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers write /logs: apt-get install bubblewrap")
TASK = Task(
    name="write-ok",
    instruction="Write ok to ok.txt.",
    tests={"check.sh": b"grep -q ok ok.txt"},
    verifier="sh /tests/check.sh",
    agent_timeout_s=AGENT_S,
)  # the agent's own part: a sandbox start, one bash, the gateway's own work (seconds on a busy machine)


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


def slow_engine_script(command: str, delay_s: float):
    """Each call takes ``delay_s`` in the engine; the agent runs ``command`` once, then answers."""

    def reply(body: dict) -> FakeReply:
        time.sleep(delay_s)
        if body["messages"][-1]["role"] == "tool":
            return FakeReply(content="Done.")
        return FakeReply(tool_calls=(("bash", {"command": command}),))

    return reply


async def run_one(gateway_url: str) -> list:
    client = GatewayClient(gateway_url, TEST_ADMIN_KEY)
    plan = RunPlan(
        run="budget",
        tasks=[TASK],
        harness=BuiltinHarness(),
        group_size=1,
        concurrency=1,
        sandbox=KINDS["local"],
        sandbox_options={"isolation": "bwrap"},
    )
    try:
        return await Runner(plan, client).run()
    finally:
        await client.close()


@needs_bwrap
async def test_slow_engine_calls_do_not_time_out_the_rollout(live_gateway, fake_engine):
    fake_engine.script = slow_engine_script("echo ok > ok.txt", delay_s=AGENT_S * 0.6)  # 1.2 budgets in the engine
    [result] = await run_one(live_gateway.url)
    assert (result.status, result.reward) == ("finished", 1.0), result.error


@needs_bwrap
async def test_an_agent_slow_on_its_own_is_stopped_with_the_overrun(live_gateway, fake_engine):
    fake_engine.script = slow_engine_script("sleep 60; echo ok > ok.txt", delay_s=0.0)
    [result] = await run_one(live_gateway.url)
    assert result.status == "failed"
    assert f"over the task's {AGENT_S:.0f} s budget" in result.error and "in model calls" in result.error

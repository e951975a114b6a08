"""Real CLI agents (OpenCode, Hermes, in their docker sandboxes) on an OpenEnv environment's tasks, through the real gateway.

The environment (tests/openenv_env.py) is served for real per rollout; the agent's MCP client reaches its
tools only through the sandbox bridge and the gateway's tools route (/r/<token>/v1/tools/mcp), which
forwards to the rollout's relay (harnesses/openenv/relay.py) holding its OpenEnv session. A scripted
engine plays the model: it calls the agent's name for the environment's add tool (OpenCode: env_add,
Hermes: mcp__env__add), then submit (the right sum in one rollout,
one more in the other), then answers. The environment's reward lands in the rollouts' rewards and the
learner trains one step on the group.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.agents import create
from harnesses.datasets import load_dataset
from harnesses.openenv.agent import with_environments
from harnesses.openenv.tasks import REWARD_NAME
from harnessrl.server import BackgroundGateway, BackgroundServer
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes import Limits, SandboxSpec
from sandboxes.kinds import KINDS
from store.store import Store
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.integration.openenv_scripts import mcp_script
from tests.learner_runs import tiny_learner_config, train_run

PACKAGE = "tests.openenv_env:AdderEnvironment"


@pytest.fixture
def gateway(sqlite_db) -> Iterator[BackgroundGateway]:
    engine = FakeEngine(model="fake-base", max_model_len=1_000_000)
    engine.script = mcp_script()
    with (
        BackgroundServer(create_fake_engine_app(engine)) as server,
        BackgroundGateway(gateway_settings(sqlite_db, server.url)) as gw,
    ):
        yield gw


@pytest.fixture
def adder_log(tmp_path, monkeypatch):
    log = tmp_path / "adder.log"
    monkeypatch.setenv("ADDER_LOG", str(log))  # the environment servers inherit it
    return log


async def play(gateway: BackgroundGateway, run: str, harness, tasks, group_size: int = 2):
    harness, rewards = with_environments(tasks, harness, (), admin_key=TEST_ADMIN_KEY)
    client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
    plan = RunPlan(
        run=run,
        tasks=tasks,
        harness=harness,
        group_size=group_size,
        concurrency=group_size,
        sandbox=KINDS["docker"],
        rewards=rewards,
        base_spec=SandboxSpec(limits=Limits(memory_bytes=2 * 2**30, cpus=1.0)),
    )
    try:
        return await Runner(plan, client).run()
    finally:
        await client.close()


@pytest.mark.parametrize("agent", ["opencode", "hermes"])
async def test_a_cli_agent_in_docker_uses_the_environments_tools_and_the_learner_trains(
    agent, gateway, adder_log, sqlite_db, tiny_model_dir, tmp_path
):
    run = f"openenv-{agent}"
    tasks = load_dataset(f"openenv:{PACKAGE}")[:1]
    results = await play(gateway, run, create(agent, sandbox="docker"), tasks)
    assert sorted(r.status for r in results) == ["finished", "finished"], [r.error for r in results]
    views = [http.get(f"{gateway.url}/api/rollouts/{r.rollout_id}", headers=ADMIN_HEADERS).json() for r in results]
    assert sorted(v["rewards"][REWARD_NAME] for v in views) == [0.0, 1.0]  # the environment's verdicts
    assert sorted(v["reward"] for v in views) == [0.0, 1.0]
    # The agent's tool calls reached the environment, each once, through the gateway.
    assert sorted(adder_log.read_text().splitlines()) == ["add(2, 3)", "add(2, 3)", "submit(5)", "submit(6)"]
    ready = http.get(f"{gateway.url}/api/groups", params={"run": run, "status": "ready"}, headers=ADMIN_HEADERS).json()[
        "data"
    ]
    assert len(ready) == 1

    store = Store.from_url(sqlite_db)
    try:
        config = tiny_learner_config(tiny_model_dir, tmp_path / "learner", groups_per_step=1, max_steps=1)
        result = await train_run(config, store, run, timeout_s=300)
    finally:
        await store.close()
    assert result.step == 1 and result.reason == "max_steps"

"""OpenEnv environments as tasks, served for real (tests/openenv_env.py on OpenEnv's create_app), through the
real gateway: the environment's tasks become harnessrl tasks, the builtin agent's tool calls reach the
environment over OpenEnv's WebSocket session, the environment's reward is recorded, and the learner trains
on the group. The model is the fake engine, scripted to call the tools (right in one rollout, wrong in the
other, so the group has something to learn)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness
from harnesses.datasets import load_dataset
from harnesses.openenv.agent import with_environments
from harnesses.openenv.tasks import REWARD_NAME, EnvServer, EnvTaskRef
from harnessrl.server import BackgroundGateway, BackgroundServer
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from store.store import Store
from tests import http_calls as http
from tests.builders import ADMIN_HEADERS, TEST_ADMIN_KEY, gateway_settings, run_config
from tests.fake_engine import FakeEngine, create_fake_engine_app
from tests.fake_tokens import FakeReply
from tests.learner_runs import tiny_learner_config, train_run

PACKAGE = "tests.openenv_env:AdderEnvironment"


def adder_script() -> callable:
    """add(a, b) from the instruction, then submit: the right sum on odd rollouts, one more on even ones."""
    submits = itertools.count(1)

    def script(body: dict) -> FakeReply:
        messages = body["messages"]
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            a, b = map(int, re.search(r"compute (\d+) \+ (\d+)", messages[-1]["content"]).groups())
            return FakeReply(tool_calls=(("add", {"a": a, "b": b}),))
        if len(tools) == 1:
            total = int(tools[0]["content"])
            return FakeReply(tool_calls=(("submit", {"answer": total if next(submits) % 2 else total + 1}),))
        return FakeReply(content="Submitted.")

    return script


@pytest.fixture
def fake_gateway(sqlite_db) -> Iterator[BackgroundGateway]:
    engine = FakeEngine(model="fake-base", max_model_len=1_000_000)
    engine.script = adder_script()
    with (
        BackgroundServer(create_fake_engine_app(engine)) as server,
        BackgroundGateway(gateway_settings(sqlite_db, server.url)) as gateway,
    ):
        yield gateway


@pytest.fixture
def adder_log(tmp_path, monkeypatch):
    log = tmp_path / "adder.log"
    monkeypatch.setenv("ADDER_LOG", str(log))  # the environment servers inherit it
    return log


async def play(gateway: BackgroundGateway, run: str, tasks, group_size: int = 2):
    harness, rewards = with_environments(tasks, BuiltinHarness(), ())
    client = GatewayClient(gateway.url, TEST_ADMIN_KEY)
    plan = RunPlan(
        run=run,
        tasks=tasks,
        harness=harness,
        group_size=group_size,
        concurrency=group_size,
        sandbox=KINDS["local"],
        rewards=rewards,
    )
    try:
        return await Runner(plan, client).run()
    finally:
        await client.close()


def test_an_installed_environment_lists_its_tasks():
    tasks = load_dataset(f"openenv:{PACKAGE}")
    assert [t.name for t in tasks] == ["adder-train-add-2-3", "adder-train-add-40-2"]
    assert tasks[1].instruction.startswith("Use the add tool to compute 40 + 2")
    assert EnvTaskRef.of(tasks[1]) == EnvTaskRef(PACKAGE, "adder", "train", 1)


async def test_a_running_environment_scores_the_builtin_agent_and_the_learner_trains(
    fake_gateway, adder_log, sqlite_db, tiny_model_dir, tmp_path
):
    with EnvServer(PACKAGE) as url:  # a server that is already running, reached by its URL
        [task, _] = load_dataset(f"openenv:{url}")
        results = await play(fake_gateway, "openenv-url", [task])
    assert sorted(r.status for r in results) == ["finished", "finished"], [r.error for r in results]
    views = [http.get(f"{fake_gateway.url}/api/rollouts/{r.rollout_id}", headers=ADMIN_HEADERS).json() for r in results]
    assert sorted(v["rewards"][REWARD_NAME] for v in views) == [0.0, 1.0]  # the environment's verdicts
    assert sorted(v["reward"] for v in views) == [0.0, 1.0]
    assert sorted(adder_log.read_text().splitlines()) == ["add(2, 3)", "add(2, 3)", "submit(5)", "submit(6)"]
    ready = http.get(
        f"{fake_gateway.url}/api/groups", params={"run": "openenv-url", "status": "ready"}, headers=ADMIN_HEADERS
    ).json()["data"]
    assert len(ready) == 1

    store = Store.from_url(sqlite_db)
    try:
        config = tiny_learner_config(tiny_model_dir, tmp_path / "learner", groups_per_step=1, max_steps=1)
        result = await train_run(config, store, "openenv-url", timeout_s=300)
    finally:
        await store.close()
    assert result.step == 1 and result.reason == "max_steps"


async def test_an_installed_environment_is_started_for_each_rollout(fake_gateway, adder_log):
    tasks = load_dataset(f"openenv:{PACKAGE}")
    results = await play(fake_gateway, "openenv-package", tasks[1:])
    assert sorted(r.reward for r in results) == [0.0, 1.0], [r.error for r in results]
    assert sorted(adder_log.read_text().splitlines()) == ["add(40, 2)", "add(40, 2)", "submit(42)", "submit(43)"]


async def test_harnessrl_run_takes_an_environment_url(fake_gateway, adder_log):
    from rollouts.launch import launch_run

    with EnvServer(PACKAGE) as url:
        config = run_config(f"openenv:{url}", "openenv-cli", group_size=2, **{"tasks.include": ["adder-train-add-2-3"]})
        summary = await launch_run(config, fake_gateway.url, TEST_ADMIN_KEY)
    assert "2 rollouts this time (2 finished, 0 failed), mean reward 0.500" in summary


def attacker(body: dict) -> FakeReply:
    """Reserved and unknown tools, bad arguments, a shell it does not have, and a second submit after the first."""
    if any(m["role"] == "tool" for m in body["messages"]):
        return FakeReply(content="Done.")
    return FakeReply(
        tool_calls=(
            ("reset", {"index": 1}),
            ("state", {}),
            ("bash", {"command": "curl 127.0.0.1"}),
            ("add", {"a": "2; import os", "b": 3}),
            ("submit", {"answer": 6}),
            ("submit", {"answer": 5}),
        )
    )


async def test_an_attacking_agent_cannot_raise_the_environments_reward(sqlite_db, adder_log):
    engine = FakeEngine(model="fake-base", max_model_len=1_000_000)
    engine.script = attacker
    with (
        BackgroundServer(create_fake_engine_app(engine)) as server,
        BackgroundGateway(gateway_settings(sqlite_db, server.url)) as gateway,
    ):
        tasks = load_dataset(f"openenv:{PACKAGE}")
        [result] = await play(gateway, "openenv-attack", tasks[:1], group_size=1)
        view = http.get(f"{gateway.url}/api/rollouts/{result.rollout_id}", headers=ADMIN_HEADERS).json()
    assert result.status == "finished" and view["rewards"][REWARD_NAME] == 0.0 and view["reward"] == 0.0
    assert adder_log.read_text().splitlines() == ["submit(6)"]  # nothing else reached a tool, nothing after done

"""Several runners on one run share its slots through leases; sandboxes reach the gateway by the URL the
worker is given (its own route to a gateway that may be on another host); a pace holds new groups back."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

import rollouts.launch
from contracts.gateway_client import GatewayClient, rebased
from harnessrl.cli.app import app
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import Admission
from rollouts.runner import Runner
from sandboxes.route import Route
from tests.builders import TEST_ADMIN_KEY, gateway_settings
from tests.unit.test_runner import TASKS, needs_bwrap, plan, solving_script


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    fake_engine.script = solving_script(TASKS)
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


@pytest.fixture
def far_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    """A gateway that names itself by a URL this worker cannot reach (its public name elsewhere)."""
    fake_engine.record_requests = False
    fake_engine.script = solving_script(TASKS)
    settings = gateway_settings(sqlite_db, fake_engine_server.url, public_url="http://127.0.0.1:9")
    with BackgroundGateway(settings) as gateway:
        yield gateway


def test_a_rollout_base_url_is_rebased_on_the_workers_gateway_url():
    url = "http://gw.internal:8000/r/hrl-abc_D-1/v1"
    assert rebased(url, "http://10.1.2.3:9000") == "http://10.1.2.3:9000/r/hrl-abc_D-1/v1"
    assert rebased(url, "https://lb.example/prefix/") == "https://lb.example/prefix/r/hrl-abc_D-1/v1"
    assert rebased(url, None) == url
    route = Route.for_gateway(rebased(url, "http://gw-2.cluster:8123"))
    assert route.upstream == ("gw-2.cluster", 8123) and route.prefix == "/r/hrl-abc_D-1/v1"


def test_run_takes_the_worker_settings(monkeypatch, tmp_path):
    seen = {}

    async def launch_run(config, *args, **kwargs):
        seen["config"] = config
        return "done"

    monkeypatch.setattr(rollouts.launch, "launch_run", launch_run)
    command = ["run", "--tasks", str(tmp_path / "t.jsonl"), "--run", "r", "--admin-key", "k"]
    assert (
        CliRunner()
        .invoke(app, [*command, "--worker-id", "node-3", "--lease-s", "12", "--sandbox-gateway", "http://gw-1:8000"])
        .exit_code
        == 0
    )
    config = seen["config"]
    assert (config.workers.worker_id, config.workers.lease_s, config.sandbox.gateway) == (
        "node-3",
        12.0,
        "http://gw-1:8000",
    )
    monkeypatch.setenv("HARNESSRL_SANDBOX_GATEWAY", "http://gw-2:8000")
    assert CliRunner().invoke(app, command).exit_code == 0
    assert (seen["config"].sandbox.gateway, seen["config"].workers.lease_s) == ("http://gw-2:8000", 30.0)


@needs_bwrap
async def test_sandboxes_reach_the_gateway_by_the_workers_url_not_the_gateways_own_name(far_gateway):
    client = GatewayClient(far_gateway.url, TEST_ADMIN_KEY)
    try:
        [unreached] = await Runner(plan(TASKS[:1], group_size=1, run="far-1"), client).run()
        assert unreached.reward != 1.0  # the bridge dialled 127.0.0.1:9, the gateway's public name
        [reached] = await Runner(
            plan(TASKS[:1], group_size=1, run="far-2", sandbox_gateway=far_gateway.url), client
        ).run()
        assert (reached.status, reached.reward) == ("finished", 1.0)
    finally:
        await client.close()


@needs_bwrap
async def test_two_runners_on_one_run_share_its_slots_and_neither_cancels_the_other(live_gateway):
    """The old runner cancelled every running rollout of the round when it started: two runners
    started together failed each other's rollouts."""
    clients = [GatewayClient(live_gateway.url, TEST_ADMIN_KEY) for _ in range(2)]
    try:
        runners = [
            Runner(plan(TASKS[:3], group_size=2, concurrency=2, worker=f"w{n}", lease_s=5.0), client)
            for n, client in enumerate(clients)
        ]
        first, second = await asyncio.gather(*[runner.run() for runner in runners])
        rollouts = await clients[0].rollouts("runner-test")
    finally:
        for client in clients:
            await client.close()
    assert first and second  # both played some
    assert Counter((r["task"], r["meta"]["index"]) for r in rollouts) == Counter(
        {(t.name, i): 1 for t in TASKS[:3] for i in range(2)}
    )  # each slot once, nothing cancelled
    assert all(r["status"] == "finished" and r["reward"] == 1.0 for r in rollouts)
    assert {r["meta"]["worker"] for r in rollouts} == {"w0", "w1"}


class Pace:
    """A scripted pace: its answers in turn, then the last one for ever; counts the questions."""

    def __init__(self, *answers: Admission):
        self.answers, self.asked = list(answers), 0

    async def __call__(self) -> Admission:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def slots_by_task(rollouts: list[dict]) -> Counter:
    return Counter(r["task"] for r in rollouts)


@needs_bwrap
async def test_a_pace_that_stops_ends_the_round_with_the_groups_begun_played_whole(live_gateway):
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    pace = Pace(Admission.GO, Admission.STOP)  # one claim of 3 slots: a group and a half begun
    try:
        results = await Runner(plan(TASKS[:4], group_size=2, concurrency=3, run="stopped", pace=pace), client).run()
        rollouts = await client.rollouts("stopped")
    finally:
        await client.close()
    assert slots_by_task(rollouts) == {TASKS[0].name: 2, TASKS[1].name: 2}  # the half-begun group finished
    assert len(results) == 4 and all(r["status"] == "finished" for r in rollouts)


@needs_bwrap
async def test_a_pace_that_holds_keeps_new_groups_back_and_the_round_goes_on_when_it_lets_go(live_gateway):
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    pace = Pace(Admission.GO, *[Admission.HOLD] * 6, Admission.GO)
    runner = Runner(plan(TASKS[:4], group_size=2, concurrency=2, run="held", pace=pace), client)
    started_while_held = set()
    runner.on_start = lambda task, index: started_while_held.add(task) if pace.asked < 8 else None
    try:
        results = await runner.run()
        rollouts = await client.rollouts("held")
    finally:
        await client.close()
    assert len(started_while_held) == 1  # the group begun before the holds, no other
    assert pace.asked >= 8  # it was asked again while holding, not given up on
    assert slots_by_task(rollouts) == {task.name: 2 for task in TASKS[:4]}  # then every slot was played
    assert len(results) == 8

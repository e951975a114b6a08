"""The runner with the builtin harness, driven by a scripted engine through a real gateway."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator

import pytest

from contracts.gateway_client import GatewayClient
from harnesses.builtin_agent import BuiltinHarness
from harnesses.grading.reward_functions import load_reward_function
from harnesses.task import Task, builtin_tasks_path, load_tasks
from harnessrl.server import BackgroundGateway
from rollouts.run_plan import RunPlan
from rollouts.runner import Runner
from sandboxes.kinds import KINDS
from tests.builders import TEST_ADMIN_KEY, gateway_settings, run_config
from tests.fake_tokens import FakeReply

TASKS = load_tasks(builtin_tasks_path())
OPTIONS = {"isolation": "bwrap" if shutil.which("bwrap") else "subprocess"}
needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="verifiers write /logs: apt-get install bubblewrap")


def solving_script(tasks: list[Task]):
    """The planned agent: run the task's reference solution with the bash tool, then answer."""
    solutions = {t.instruction: t.solution for t in tasks}

    def reply(body: dict) -> FakeReply:
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            return FakeReply(content="Done.")
        instruction = next(m["content"] for m in messages if m["role"] == "user")
        return FakeReply(tool_calls=(("bash", {"command": solutions[instruction]}),))

    return reply


@pytest.fixture
def live_gateway(sqlite_db, fake_engine, fake_engine_server) -> Iterator[BackgroundGateway]:
    fake_engine.record_requests = False
    with BackgroundGateway(gateway_settings(sqlite_db, fake_engine_server.url)) as gateway:
        yield gateway


def plan(tasks, **overrides) -> RunPlan:
    fields = dict(
        run="runner-test",
        tasks=tasks,
        harness=BuiltinHarness(),
        group_size=2,
        concurrency=4,
        sandbox=KINDS["local"],
        sandbox_options=OPTIONS,
    )
    fields.update(overrides)
    return RunPlan(**fields)


@needs_bwrap
async def test_builtin_harness_solves_every_builtin_task_with_the_scripted_engine(live_gateway, fake_engine):
    fake_engine.script = solving_script(TASKS)
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    results = await Runner(plan(TASKS, group_size=1), client).run()
    await client.close()
    failed = {r.task: (r.status, r.reward, r.error) for r in results if r.reward != 1.0}
    assert not failed and len(results) == len(TASKS)


@needs_bwrap
async def test_groups_become_ready_and_reward_functions_add_up(live_gateway, fake_engine, monkeypatch):
    fake_engine.script = solving_script(TASKS)
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    bonus = load_reward_function("tests.unit.test_runner:half_point")
    results = await Runner(plan(TASKS[:2], rewards=(bonus,)), client).run()
    assert sorted(r.reward for r in results) == [1.5] * 4
    groups = (await client._json("GET", "/api/groups", params={"run": "runner-test", "status": "ready"}))["data"]
    assert len(groups) == 2 and all(g["size"] == 2 for g in groups)
    await client.close()


def half_point(task, verdict) -> float:
    return 0.5 if verdict.reward == 1.0 and task.name else 0.0


@needs_bwrap
async def test_a_crashing_agent_fails_its_rollout_and_the_run_goes_on(live_gateway, fake_engine):
    fake_engine.script = solving_script(TASKS)

    class Crashing(BuiltinHarness):
        async def run(self, sandbox, task, target, timeout_s):
            if task.name == TASKS[0].name:
                raise RuntimeError("agent binary segfaulted")
            return await super().run(sandbox, task, target, timeout_s)

    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    results = await Runner(plan(TASKS[:2], harness=Crashing(), group_size=1), client).run()
    by_task = {r.task: r for r in results}
    assert by_task[TASKS[0].name].status == "failed" and "segfaulted" in by_task[TASKS[0].name].error
    assert by_task[TASKS[1].name].reward == 1.0
    await client.close()


@needs_bwrap
async def test_rerunning_skips_ended_rollouts_and_replaces_interrupted_ones(live_gateway, fake_engine):
    fake_engine.script = solving_script(TASKS)
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    # An interrupted earlier runner left (task 0, index 0) running.
    await client.create_rollout("runner-test", TASKS[0].name, "r0", 2, {"harness": "builtin", "round": 0, "index": 0})
    runner = Runner(plan(TASKS[:1]), client)
    assert [(t.name, i) for t, i in await runner.pending()] == [(TASKS[0].name, 0), (TASKS[0].name, 1)]
    await runner.run()
    assert await Runner(plan(TASKS[:1]), client).pending() == []
    rollouts = await client.rollouts("runner-test")
    assert sorted((r["meta"]["index"], r["status"]) for r in rollouts) == [
        (0, "cancelled"),
        (0, "finished"),
        (1, "finished"),
    ]
    # the cancelled rollout gave its place to the replacement: the group of 2 is ready, with both scored
    [group] = await client.groups("runner-test", "ready")
    assert sorted(r["status"] for r in group["rollouts"]) == ["cancelled", "finished", "finished"]
    next_round = Runner(plan(TASKS[:1], round=1), client)
    assert len(await next_round.pending()) == 2  # a new round samples the task again, in a new group
    await client.close()


def test_reward_function_specs_are_checked():
    with pytest.raises(ValueError, match="module:function"):
        load_reward_function("nocolon")
    with pytest.raises(ValueError, match="cannot load"):
        load_reward_function("tests.unit.test_runner:missing")


@needs_bwrap
async def test_the_verifiers_metrics_and_whole_log_are_kept_with_the_rollout_not_in_its_reward(
    live_gateway, fake_engine
):
    fake_engine.script = lambda body: FakeReply(content="Done.")
    verifier = (
        "echo 'head of the log'; head -c 200000 /dev/zero | tr '\\0' x; echo; echo '5 cases passed'; "
        'echo \'{"reward": 1.0, "cases_passed": 5, "note": "fast"}\' > /logs/verifier/reward.json'
    )
    task = Task(name="metrics", instruction="Say done.", verifier=verifier, reward_source="file")
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    [result] = await Runner(plan([task], group_size=1), client).run()
    view = await client.rollout(result.rollout_id)
    await client.close()
    assert (result.status, view["reward"], view["rewards"]) == ("finished", 1.0, {"verifier": 1.0}), result.error
    detail = view["reward_details"]["verifier"]
    assert detail["metrics"] == {"cases_passed": 5.0} and detail["exit_code"] == 0
    assert view["agent_exit_code"] == 0 and view["agent_log"] is not None  # the agent's side, kept too
    log = detail["log"]
    assert log.startswith("head of the log") and log.rstrip().endswith("5 cases passed") and "cut here" in log


@needs_bwrap
async def test_a_link_out_of_the_workspace_is_removed_and_named_in_the_stored_rollout(live_gateway, fake_engine):
    """The agent answers with a link to the verifier's expected file: it earns nothing, and the rollout
    the API serves names the link that was removed."""
    fake_engine.script = solving_script([task := linking_task()])
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    [result] = await Runner(plan([task], group_size=1), client).run()
    view = await client.rollout(result.rollout_id)
    await client.close()
    assert (result.status, view["reward"]) == ("finished", 0.0), result.error
    refused = view["reward_details"]["verifier"]["refused_links"]
    assert refused == {"count": 1, "links": ["answer.txt -> /tests/expected.txt"]}


def linking_task() -> Task:
    return Task(
        name="linking",
        instruction="Write the expected answer into answer.txt.",
        tests={"expected.txt": b"42\n"},
        verifier="cmp -s answer.txt /tests/expected.txt",
        reward_source="exit_code",
        solution="ln -s /tests/expected.txt answer.txt",
    )


@needs_bwrap
async def test_a_rollout_whose_agent_never_got_an_answer_fails_with_the_cause_and_is_not_scored(
    live_gateway, fake_engine
):
    from rollouts.launch import summary_line

    fake_engine.max_model_len = 16  # the builtin harness's first prompt alone is longer
    client = GatewayClient(live_gateway.url, TEST_ADMIN_KEY)
    results = await Runner(plan(TASKS[:1], group_size=2), client).run()
    views = [await client.rollout(r.rollout_id) for r in results]
    await client.close()
    assert {(r.status, r.reward) for r in results} == {("failed", None)}, results
    assert all(v["error"].startswith("no answer from the model: first prompt ") for v in views), views[0]["error"]
    assert all(v["reward"] is None and v["rewards"] == {} for v in views)  # no zero reward to train on
    assert "; 2 failed: no answer from the model: first prompt" in summary_line("r", results)


@needs_bwrap
async def test_a_runs_sandbox_kind_is_parsed_once_when_its_config_is_read(live_gateway, fake_engine, monkeypatch):
    """--sandbox becomes a Kind when the config is read (harnessrl/config/sections.py); the launch, the harness,
    the runner, the task environments, the grader and the sandboxes take that Kind as it is."""
    from rollouts.launch import launch_run
    from sandboxes import kinds

    parsed, original = [], kinds.sandbox_kind

    def counted(name: str):
        parsed.append(name)
        return original(name)

    for module in list(sys.modules.values()):  # every module that imported the parse, by name or as kinds'
        if vars(module).get("sandbox_kind") is original:
            monkeypatch.setattr(module, "sandbox_kind", counted)
    fake_engine.script = solving_script(TASKS)
    keys = {"tasks.include": [TASKS[0].name], "sandbox.kind": "local"}
    config = run_config(builtin_tasks_path(), "kind-once", group_size=2, concurrency=2, **keys)
    summary = await launch_run(config, live_gateway.url, TEST_ADMIN_KEY)
    assert "2 rollouts this time (2 finished, 0 failed)" in summary
    assert parsed == ["local"]

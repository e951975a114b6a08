"""Qwen Code, one of the agents Harbor installs, run as a harness: it solves a public-style Harbor task
through the real gateway, and its calls are recorded with their token ids.

As tests/integration/test_harbor_agents.py does for the other agents: the task
(tests/fixtures/harbor_public/csv-total) builds its image from its Dockerfile (WORKDIR /app, no
Node.js), Qwen Code (with its Node.js 22) is copied into an image derived from it
(docker/Dockerfile.task-qwen-code), and a scripted engine behind the real gateway has the agent write
42 to /app/total.txt with its own write_file tool, then answer "Done.". The verifier's reward is
recorded on the rollout, in docker and in bubblewrap on the derived image's exported root; the
host's install runs a plain task in bubblewrap (no image at all). Every call the agent made is in the
rollout's call view with its prompt ids, output ids and one log-prob per output id.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harnesses.agents.qwen_code import VERSION
from harnesses.registry import create_harness
from harnesses.task import Task, load_harbor
from harnessrl.server import BackgroundGateway
from tests.agent_scripts import write_then_done
from tests.builders import ADMIN_HEADERS, run_single_rollout
from tests.fake_engine import FakeEngine

TASK = load_harbor(Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public" / "csv-total")
script = write_then_done("/app/total.txt", "42\n", side_reply="Sum of sales")


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = script, []
    return fake


def recorded_calls(gateway: BackgroundGateway, rollout_id: int) -> list[dict]:
    with httpx.Client(base_url=gateway.url, timeout=30, headers=ADMIN_HEADERS) as http:
        assert http.get(f"/api/rollouts/{rollout_id}").json()["rewards"] == {"verifier": 1.0}
        calls = http.get(f"/api/rollouts/{rollout_id}/calls", params={"limit": 100}).json()["data"]
        return [http.get(f"/api/calls/{call['id']}").json() for call in sorted(calls, key=lambda c: c["id"])]


def check_solved(gateway: BackgroundGateway, engine: FakeEngine, result) -> None:
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    asked = [r for r in engine.requests if r.get("tools")]
    assert len(asked) >= 2  # the tool call and the final answer
    assert "write_file" in {t["function"]["name"] for t in asked[0]["tools"]}
    calls = recorded_calls(gateway, result.rollout_id)
    assert len(calls) == len(engine.requests)  # each call the engine answered is recorded
    for call in calls:
        assert call["dialect"] == "chat" and call["request"]["tools"] and call["tags"] == []  # its main loop
        assert len(call["prompt_ids"]) > 1000 and call["output_ids"]
        assert len(call["output_logprobs"]) == len(call["output_ids"])
    assert calls[-1]["request"]["max_tokens"] == 4096  # the adapter's cap, not its own 32,000


def check_derived_images() -> None:
    """The task image with Qwen Code inside was built, and its own Node.js 22 runs it: the task's PATH
    has no node (the task image has none)."""
    import docker

    client = docker.from_env()
    tags = [tag for image in client.images.list() for tag in image.tags]
    tags = [tag for tag in tags if tag.startswith("harnessrl-task/csv-total-qwen-code:")]
    assert tags, "no task image with Qwen Code inside was built"
    for tag in tags:
        found = client.containers.run(
            tag, ["sh", "-c", "command -v node || echo none; qwen --version"], remove=True, network_mode="none"
        )
        assert found.split() == [b"none", VERSION.encode()]


async def test_qwen_code_solves_a_harbor_task_inside_the_task_image_in_docker(gateway, engine):
    result = await run_single_rollout(
        create_harness("qwen-code", "docker"), gateway.url, "harbor-qwen-code", TASK, "docker", {}
    )
    check_solved(gateway, engine, result)
    check_derived_images()


async def test_qwen_code_solves_a_harbor_task_in_bubblewrap_on_the_exported_task_image(gateway, engine):
    result = await run_single_rollout(
        create_harness("qwen-code", "local"),
        gateway.url,
        "harbor-qwen-code-local",
        TASK,
        "local",
        {"isolation": "bwrap"},
    )
    check_solved(gateway, engine, result)


async def test_qwen_code_from_the_hosts_install_solves_a_plain_task_in_bubblewrap(gateway, engine):
    engine.script = write_then_done("/workspace/total.txt", "42\n", side_reply="Sum of sales")
    task = Task(name="plain-total", instruction="Write 42 to total.txt.", verifier='test "$(cat total.txt)" = 42')
    result = await run_single_rollout(
        create_harness("qwen-code", "local"),
        gateway.url,
        "plain-qwen-code-local",
        task,
        "local",
        {"isolation": "bwrap"},
    )
    check_solved(gateway, engine, result)

"""The real OpenCode, pi, Hermes and Qwen Code binaries, in sandboxes, driven through a real gateway.

A scripted engine stands in for the model: asked with tools, it calls the agent's own file-writing
tool (found in the request's `tools`) to write hello.txt, then answers "Done."; asked without tools
(a side call: a title, a summary) it answers with a short title. Each rollout runs through the
runner end to end: the agent writes the file, the verifier scores 1 (it also checks the final answer
the adapter extracted), and every engine call is recorded under the rollout, side calls tagged.

Local sandboxes need bubblewrap and the agents installed on the host (`.ci/run` installs them);
docker sandboxes need a Docker daemon and the harness images (`docker/setup-daemon.sh`, then
`harnessrl images build`). Whatever is missing is skipped, with the command that provides it.
"""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from harnesses.agents import AgentNotInstalled, create
from harnesses.task import Task
from harnessrl.server import BackgroundGateway
from sandboxes import WORKSPACE
from tests.agent_scripts import write_then_done
from tests.builders import ADMIN_HEADERS, run_single_rollout
from tests.fake_engine import FakeEngine

AGENTS = ("opencode", "pi", "hermes", "qwen-code")
TITLE = "Hello file"
TASK = Task(
    name="hello-file",
    instruction="Create a file hello.txt in the current directory containing exactly: hello",
    # The file the agent's tool wrote, and the final answer the adapter parsed from the agent's output.
    verifier='test "$(cat hello.txt)" = hello && grep -qx Done. /logs/agent/final.txt',
    agent_timeout_s=240.0,
    verifier_timeout_s=60.0,
)


script = write_then_done(f"{WORKSPACE}/hello.txt", "hello", side_reply=TITLE)


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = script, []
    return fake


def local_harness(name: str):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap not installed: apt-get install -y bubblewrap")
    harness = create(name, sandbox="local")
    try:
        harness.host_install()
    except AgentNotInstalled as exc:
        pytest.skip(str(exc))
    return harness


def docker_harness(name: str):
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker daemon reachable (run docker/setup-daemon.sh): {type(exc).__name__}")
    harness = create(name, sandbox="docker")
    try:
        client.images.get(harness.image)
    except docker.errors.ImageNotFound:
        pytest.skip(f"image {harness.image} missing: harnessrl images build --harness {name}")
    return harness


async def run_one(harness, gateway: BackgroundGateway, sandbox: str, options: dict):
    return await run_single_rollout(harness, gateway.url, f"real-{harness.name}-{sandbox}", TASK, sandbox, options)


def recorded_calls(gateway: BackgroundGateway, rollout_id: int) -> list[dict]:
    with httpx.Client(base_url=gateway.url, timeout=30, headers=ADMIN_HEADERS) as http:
        calls = http.get(f"/api/rollouts/{rollout_id}/calls", params={"limit": 1000}).json()["data"]
        return [http.get(f"/api/calls/{c['id']}").json() for c in calls]


def check_recorded(gateway: BackgroundGateway, engine: FakeEngine, rollout_id: int) -> None:
    calls = recorded_calls(gateway, rollout_id)
    # Every engine call of this test belongs to this rollout (nothing went to the adhoc run).
    assert len(calls) == len(engine.requests)
    main = [c for c in calls if c["request"].get("tools")]
    side = [c for c in calls if not c["request"].get("tools")]
    assert len(main) >= 2, "expected the tool call and the final answer"
    assert all(c["tags"] == [] for c in main)
    assert all(c["tags"] for c in side), [(c["tags"], str(c["request"]["messages"])[:300]) for c in side]
    assert {c["model"] for c in main} == {"policy"}


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_in_local_sandbox_writes_the_file_and_scores_one(name, gateway, engine):
    harness = local_harness(name)
    result = await run_one(harness, gateway, "local", {"isolation": "bwrap"})
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    check_recorded(gateway, engine, result.rollout_id)


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_in_docker_sandbox_writes_the_file_and_scores_one(name, gateway, engine):
    harness = docker_harness(name)
    result = await run_one(harness, gateway, "docker", {})
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    check_recorded(gateway, engine, result.rollout_id)


def first_main_prompt(requests: list[dict]) -> tuple[str, str]:
    """The system text and the tools of the first call with tools: the prefix every turn extends."""
    body = next(r for r in requests if r.get("tools"))
    system = "".join(str(m.get("content")) for m in body["messages"] if m["role"] in ("system", "developer"))
    return system, json.dumps(body["tools"], sort_keys=True)


def shared_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_prompt_prefix_is_the_same_across_rollouts_of_a_task(name, gateway, engine):
    """G rollouts of one task share their first prompt (system prompt, tools), so vLLM's prefix cache
    computes it once per group: nothing in it may vary per rollout (session ids, temp paths, times)."""
    harness = local_harness(name)
    prompts = []
    for index in range(2):
        engine.requests = []
        result = await run_single_rollout(
            harness, gateway.url, f"prefix-{name}-{index}", TASK, "local", {"isolation": "bwrap"}
        )
        assert result.status == "finished", result.error
        prompts.append(first_main_prompt(engine.requests))
    (system_a, tools_a), (system_b, tools_b) = prompts
    assert tools_a == tools_b
    assert shared_prefix(system_a, system_b) >= 0.97 * min(len(system_a), len(system_b)), (
        f"{name}'s system prompt differs early between rollouts: ...{system_a[shared_prefix(system_a, system_b) :][:200]}"
    )

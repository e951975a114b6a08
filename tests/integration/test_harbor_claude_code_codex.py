"""Claude Code and Codex CLI solve a public-style Harbor task inside the task's own image.

As tests/integration/test_harbor_agents.py does for OpenCode, pi and Hermes: the task
(tests/fixtures/harbor_public/csv-total) builds its image from its Dockerfile (WORKDIR /app, no
Node.js), the agent is copied into an image derived from it (docker/Dockerfile.task-claude-code,
-codex), and a scripted engine behind the real gateway has the agent write 42 to /app/total.txt with
its own tool (Claude Code's Write, Codex's exec_command), then answer "Done.". The verifier's reward
is recorded on the rollout, in docker and in bubblewrap on the derived image's exported root.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harnesses.registry import create_harness
from harnesses.task import load_harbor
from harnessrl.server import BackgroundGateway
from tests.builders import ADMIN_HEADERS, run_single_rollout
from tests.fake_engine import FakeEngine
from tests.fake_tokens import FakeReply

TASK = load_harbor(Path(__file__).resolve().parents[1] / "fixtures" / "harbor_public" / "csv-total")
AGENTS = ("claude-code", "codex")
WRITES = {
    "Write": {"file_path": "/app/total.txt", "content": "42\n"},
    "exec_command": {"cmd": "printf '42\\n' > /app/total.txt"},
}


def script(body: dict) -> FakeReply:
    if not body.get("tools"):
        return FakeReply(content="Sum of sales")  # a side call
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    if any(m["role"] == "tool" for m in messages[last_user:]):
        return FakeReply(content="Done.")
    names = {t["function"]["name"] for t in body["tools"]}
    name = next(n for n in WRITES if n in names)
    return FakeReply(tool_calls=((name, WRITES[name]),))


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = script, []
    return fake


def derived_images(name: str) -> list[str]:
    """Tags of the task images derived with this agent inside."""
    import docker

    tags = [tag for image in docker.from_env().images.list() for tag in image.tags]
    return [tag for tag in tags if tag.startswith(f"harnessrl-task/csv-total-{name}:")]


def check_solved(gateway: BackgroundGateway, engine: FakeEngine, result, name: str) -> None:
    import docker

    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    with httpx.Client(base_url=gateway.url, timeout=30, headers=ADMIN_HEADERS) as http:
        assert http.get(f"/api/rollouts/{result.rollout_id}").json()["rewards"] == {"verifier": 1.0}
    assert len([r for r in engine.requests if r.get("tools")]) >= 2  # the tool call and the final answer
    tags = derived_images(name)
    assert tags, f"no task image with {name} inside was built"
    for tag in tags:  # the task's image has no Node.js, and the agent needs none
        found = docker.from_env().containers.run(
            tag, ["sh", "-c", "command -v node || echo none"], remove=True, network_mode="none"
        )
        assert found.strip() == b"none"


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_solves_a_harbor_task_inside_the_task_image_in_docker(name, gateway, engine):
    result = await run_single_rollout(create_harness(name, "docker"), gateway.url, f"harbor-{name}", TASK, "docker", {})
    check_solved(gateway, engine, result, name)


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_solves_a_harbor_task_in_bubblewrap_on_the_exported_task_image(name, gateway, engine):
    result = await run_single_rollout(
        create_harness(name, "local"), gateway.url, f"harbor-{name}-local", TASK, "local", {"isolation": "bwrap"}
    )
    check_solved(gateway, engine, result, name)

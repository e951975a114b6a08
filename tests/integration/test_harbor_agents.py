"""Each agent (OpenCode, pi, Hermes, builtin) solves a public-style Harbor task inside the task's own image.

The task (tests/fixtures/harbor_public/csv-total) is written as public Harbor tasks are: its
Dockerfile COPYs the data to WORKDIR /app and its verifier reads /app/total.txt and writes
reward.json. A scripted engine stands in for the model behind the real gateway: asked with tools, it
calls the agent's own file-writing tool to write 42 to /app/total.txt, then answers "Done."; side
calls get a title. Each rollout runs through the runner: the task image is built from its
Dockerfile, the CLI agent is installed into an image derived from it, the docker sandbox reaches the
gateway through the forwarder sidecar (the task image has nothing for it), and the verifier's reward
is recorded on the rollout.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harnesses.registry import create_harness
from harnesses.task import load_harbor
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


def rollout_view(gateway: BackgroundGateway, rollout_id: int) -> dict:
    with httpx.Client(base_url=gateway.url, timeout=30, headers=ADMIN_HEADERS) as http:
        return http.get(f"/api/rollouts/{rollout_id}").json()


@pytest.mark.parametrize("name", ["opencode", "pi", "hermes", "builtin"])
async def test_agent_solves_a_harbor_task_inside_the_task_image_and_the_verifier_reward_is_recorded(
    name, gateway, engine
):
    result = await run_single_rollout(create_harness(name, "docker"), gateway.url, f"harbor-{name}", TASK, "docker", {})
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    view = rollout_view(gateway, result.rollout_id)
    assert view["rewards"] == {"verifier": 1.0}
    assert len([r for r in engine.requests if r.get("tools")]) >= 2  # the tool call and the final answer
    assert ran_in_task_image(name)


def ran_in_task_image(name: str) -> bool:
    """The task's image was built, and for a CLI agent the image derived from it with the agent inside."""
    import docker

    tags = {tag for image in docker.from_env().images.list() for tag in image.tags}
    wanted = "harnessrl-task/csv-total" + ("" if name == "builtin" else f"-{name}") + ":"
    return any(tag.startswith(wanted) for tag in tags)


async def test_builtin_solves_a_harbor_task_in_a_bubblewrap_sandbox_of_the_exported_image(gateway, engine):
    result = await run_single_rollout(
        create_harness("builtin", "local"), gateway.url, "harbor-builtin-local", TASK, "local", {"isolation": "bwrap"}
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)


def task_without_python(root: Path):
    """csv-total on a base with no python3 at all (as the real debian:bookworm-slim is)."""
    import shutil

    folder = root / "csv-total-nopy"
    shutil.copytree(TASK.source, folder)
    dockerfile = folder / "environment" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text().replace("WORKDIR /app", "RUN rm -rf /usr/bin/python3* /usr/lib/python3*\nWORKDIR /app")
    )
    return load_harbor(folder)


@pytest.mark.parametrize("name", ["pi", "opencode"])
async def test_cli_agent_solves_a_harbor_task_in_bubblewrap_on_an_image_without_python(name, gateway, engine, tmp_path):
    task = task_without_python(tmp_path)
    result = await run_single_rollout(
        create_harness(name, "local"), gateway.url, f"harbor-{name}-local-nopy", task, "local", {"isolation": "bwrap"}
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    assert len([r for r in engine.requests if r.get("tools")]) >= 2


async def test_docker_sandbox_route_needs_no_python_in_the_task_image(gateway, engine, tmp_path):
    task = task_without_python(tmp_path)
    result = await run_single_rollout(
        create_harness("pi", "docker"), gateway.url, "harbor-pi-docker-nopy", task, "docker", {}
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)

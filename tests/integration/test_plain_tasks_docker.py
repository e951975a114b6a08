"""Tasks without an image of their own (the builtin families: an instruction, files and a verifier) run
in docker sandboxes too, on the plain base image: through the runner (what `harnessrl run --sandbox
docker` and the compose stack's workers do) and through `harnessrl tasks check`."""

from __future__ import annotations

import pytest

from harnesses.environments import Environments
from harnesses.families import sum_task
from harnesses.registry import create_harness
from rollouts.checks import CheckSettings, check_task
from sandboxes.kinds import KINDS
from tests.builders import run_single_rollout
from tests.fake_engine import FakeEngine
from tests.fake_tokens import FakeReply
from tests.integration.backends import DOCKER_SKIP

pytestmark = pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")
TASK = sum_task("plain-3+4", 3, 4, "test")


@pytest.fixture
def engine(engine_server) -> FakeEngine:
    fake = engine_server.app.state.engine
    fake.script, fake.requests = [FakeReply(content="7")], []
    return fake


async def test_the_builtin_harness_plays_a_task_without_an_image_in_a_docker_sandbox(gateway, engine):
    result = await run_single_rollout(
        create_harness("builtin", "docker"), gateway.url, "plain-docker", TASK, "docker", {}
    )
    assert (result.status, result.reward, result.error) == ("finished", 1.0, None)
    assert [r["messages"][-1]["content"] for r in engine.requests][-1].startswith("What is 3 + 4?")


async def test_tasks_check_runs_the_oracle_and_nothing_on_a_task_without_an_image_in_docker():
    check = await check_task(TASK, CheckSettings(sandbox=KINDS["docker"]), Environments())
    assert (check.oracle.reward, check.nop.reward) == (1.0, 0.0), (check.oracle.reason, check.nop.reason)

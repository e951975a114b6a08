"""One list of harnesses (harnesses/registry.py): every harness it names can be created, the CLI agents
it names are exactly the adapters, images and task-image layers there are, and the CLI's help and
checks read it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnesses import agents
from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness
from harnesses.images import DOCKER_DIR
from harnesses.registry import CLI_AGENTS, create_harness, harness_names
from harnessrl.cli.app import app


@pytest.mark.parametrize("name", harness_names())
def test_every_named_harness_can_be_created(name):
    harness = create_harness(name, "docker")
    assert harness is not None
    if name == "oneshot":
        assert isinstance(harness, BuiltinHarness) and harness.settings == ONE_SHOT


def test_the_cli_agents_are_exactly_the_adapters_and_their_images():
    assert tuple(agents.AGENTS) == CLI_AGENTS
    images = {p.name.removeprefix("Dockerfile.") for p in DOCKER_DIR.glob("Dockerfile.*")}
    for name in CLI_AGENTS:
        assert name in images and f"task-{name}" in images
    assert {n.removeprefix("task-") for n in images if n.startswith("task-")} == set(CLI_AGENTS)


def test_an_unknown_harness_names_every_choice():
    with pytest.raises(ValueError, match="choose one of builtin, opencode, pi"):
        create_harness("claude")


def test_the_cli_help_lists_the_registry():
    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "400"}).output
    assert " | ".join(harness_names()) in " ".join(shown.split())

"""One list of harnesses (harnesses/registry.py, the CLI agents from ``AGENTS``): every harness it names can
be created, the CLI agents are exactly the images and task-image layers there are, a class added to
``AGENTS`` is a harness everywhere, and the CLI's help and checks read the list."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnesses import agents
from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness
from harnesses.images import DOCKER_DIR
from harnesses.registry import agent_names, cli_agents, create_harness, harness_names
from harnessrl.cli.app import app


@pytest.mark.parametrize("name", harness_names())
def test_every_named_harness_can_be_created(name):
    harness = create_harness(name, "docker")
    assert harness is not None
    if name == "oneshot":
        assert isinstance(harness, BuiltinHarness) and harness.settings == ONE_SHOT


def test_the_cli_agents_are_exactly_the_adapters_and_their_images():
    assert all(name == agent.name for name, agent in agents.AGENTS.items())
    images = {p.name.removeprefix("Dockerfile.") for p in DOCKER_DIR.glob("Dockerfile.*")}
    for name in cli_agents():
        assert name in images and f"task-{name}" in images
    assert {n.removeprefix("task-") for n in images if n.startswith("task-")} == set(cli_agents())


def test_a_class_added_to_agents_is_a_harness_everywhere(monkeypatch):
    class Toy(agents.PiHarness):
        name = "toy"

    monkeypatch.setitem(agents.AGENTS, "toy", Toy)
    assert "toy" in cli_agents() and "toy" in agent_names() and "toy" in harness_names()
    assert isinstance(create_harness("toy", "docker"), Toy)


def test_an_unknown_harness_names_every_choice():
    with pytest.raises(ValueError, match="choose one of builtin, opencode, pi"):
        create_harness("claude")


def test_the_cli_help_lists_the_registry():
    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "400"}).output
    assert " | ".join(harness_names()) in " ".join(shown.split())

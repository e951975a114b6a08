"""docs/extending.md's recipes, walked: every file it cites exists, every ```NAME` in `module.py``` it
cites is defined there, and each recipe's registration step (a harness in ``AGENTS``, a sandbox kind in
``KINDS``, a capture mode in ``MODES``) is the one place the rest of the house reads. The whole harness
recipe, through the gateway, is tests/integration/test_toy_harness.py."""

from __future__ import annotations

import importlib
import re
import typing

import pytest
import typer
from pydantic import Field, create_model
from typer.testing import CliRunner

from gateway.api.protocol import CreateRollout
from harnesses import agents
from harnesses.registry import agent_names, cli_agents, create_harness, harness_names
from harnessrl.cli.job_config import config_command
from harnessrl.cli.options import checked_sandbox
from harnessrl.config.jobs import RunConfig
from sandboxes import SandboxSpec, create_sandbox, kinds
from store import capture_modes
from tests.unit.test_import_cycles import ROOT

DOC = (ROOT / "docs" / "extending.md").read_text()
CITED_PATH = re.compile(r"(?<!Harbor's )`((?:[\w.-]+/)+[\w.<>-]*)`")  # a task's own files are Harbor's
NAME_IN_MODULE = re.compile(r"`(\w+)`(?:\s\([^)]*\))?\sin\s`((?:\w+/)*\w+\.py)`")


def recipe(title: str) -> str:
    """The section of the doc under ``## <title>``."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert match, f"docs/extending.md has no recipe {title!r}"
    return match.group(1)


def module_of(path: str):
    return importlib.import_module(path.removesuffix(".py").removesuffix("/__init__").replace("/", "."))


def test_every_file_the_doc_cites_exists():
    cited = {path for path in CITED_PATH.findall(DOC) if "<" not in path and not path.startswith("harbor/")}
    assert len(cited) > 20
    assert sorted(path for path in cited if not (ROOT / path).exists()) == []


def test_every_name_the_doc_places_in_a_module_is_defined_there():
    placed = NAME_IN_MODULE.findall(DOC)
    assert ("AGENTS", "harnesses/agents/__init__.py") in placed and ("KINDS", "sandboxes/kinds.py") in placed
    assert [(name, path) for name, path in placed if not hasattr(module_of(path), name)] == []


def test_the_harness_recipe_registers_in_agents_alone(monkeypatch):
    steps = recipe("A harness: another coding agent")
    assert "`AGENTS` in `harnesses/agents/__init__.py`" in steps and "CLI_AGENTS" not in steps

    class Toy(agents.PiHarness):
        name = "toy"

    monkeypatch.setitem(agents.AGENTS, Toy.name, Toy)  # the recipe's one registration
    assert "toy" in cli_agents() and "toy" in agent_names() and "toy" in harness_names()
    assert isinstance(create_harness("toy", "docker"), Toy)


class ToySandbox:
    """A backend as the recipe adds one: its module, with a Sandbox class whose ``create`` starts one."""

    def __init__(self, spec: SandboxSpec, options: dict):
        self.spec, self.options = spec, options

    @classmethod
    async def create(cls, spec: SandboxSpec, **options) -> ToySandbox:
        return cls(spec, options)


def test_the_sandbox_recipe_is_its_backend_and_one_entry_in_kinds(monkeypatch):
    steps = recipe("A sandbox backend")
    assert "`KINDS` in\n`sandboxes/kinds.py`" in steps and "create_sandbox" in steps
    toy = kinds.Kind("toy", runs_images=True, bridged=True, backend=f"{__name__}:ToySandbox")
    monkeypatch.setitem(kinds.KINDS, toy.name, toy)  # the one registration
    assert kinds.sandbox_kind("toy") == toy and "toy" in kinds.choices() and "toy" in kinds.bridged_kinds()
    assert checked_sandbox("toy", None, loopback_gateway=True) == {}  # the CLI's check takes it
    import asyncio

    started = asyncio.run(create_sandbox("toy", SandboxSpec(image="toy:1"), region="here"))
    assert isinstance(started, ToySandbox) and (started.spec.image, started.options) == ("toy:1", {"region": "here"})


def test_the_capture_recipe_is_one_entry_in_modes():
    steps = recipe("A capture mode")
    assert "`MODES` in `store/capture_modes.py`" in steps
    wire = typing.get_args(CreateRollout.model_fields["capture"].annotation)[0]
    assert typing.get_args(wire) == tuple(capture_modes.MODES) == capture_modes.CAPTURE_MODES
    assert all(f"{mode} ({what})" in capture_modes.capture_help() for mode, what in capture_modes.MODES.items())
    assert {capture_modes.DEFAULT_CAPTURE, capture_modes.TEACHER_CAPTURE} <= set(capture_modes.MODES)


def test_the_run_option_recipe_is_one_field_in_a_section():
    steps = recipe("A run option")
    assert "`config_command` in `harnessrl/cli/job_config.py`" in steps and "Field(" in steps
    name, default = re.search(r"^    (\w+): int = (Field\(.*\))  #", steps, re.M).groups()  # the recipe's line
    planted = create_model("Planted", __base__=RunConfig, **{name: (int, eval(default, {"Field": Field}))})
    made, seen = typer.Typer(), []
    made.command()(config_command(planted)(seen.append))
    result = CliRunner().invoke(made, ["--tasks", "builtin:shell", "--run", "r", f"--{name}", "5"])
    assert result.exit_code == 0, result.output
    assert getattr(seen[0], name) == 5


@pytest.mark.parametrize(
    "title",
    [
        "A harness: another coding agent",
        "A reward",
        "A run option",
        "A sandbox backend",
        "A capture mode",
        "A wire dialect",
    ],
)
def test_every_recipe_names_a_test_to_copy(title):
    copied = re.findall(r"`(tests/[\w/]+\.py)`", recipe(title))
    assert copied and all((ROOT / path).exists() for path in copied)

"""quickstart's rounds and evaluations run where --sandbox says, and refuse what cannot work before anything starts."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from harnessrl.cli.app import app
from harnessrl.training.quickstart_plan import QuickstartPlan, create_agent
from sandboxes.kinds import KINDS


def quickstart(*args: str):
    """The command's result, its output on one line (the console wraps it)."""
    result = CliRunner().invoke(app, ["quickstart", "--harness", "pi", *args])
    result.text = " ".join(result.output.split())
    return result


def test_a_harbor_sandbox_without_a_served_gateway_is_refused_naming_serve_public_url():
    refused = quickstart("--sandbox", "harbor:podman")
    assert refused.exit_code != 0 and "serve --public-url" in refused.text


def test_a_harbor_sandbox_with_a_warm_start_is_refused_its_teacher_listens_on_loopback():
    refused = quickstart("--sandbox", "harbor:podman", "--gateway", "http://10.0.0.5:8000", "--warm-start")
    assert refused.exit_code != 0 and "warm-start with a local or docker sandbox first" in refused.text


def test_an_unknown_sandbox_kind_is_refused_listing_the_kinds():
    refused = quickstart("--sandbox", "vm")
    assert refused.exit_code != 0 and "harbor:<type>" in refused.text


def test_local_sandboxes_take_no_options():
    refused = quickstart("--sandbox-option", "isolation=subprocess")
    assert refused.exit_code != 0 and "--sandbox-option is for harbor:<type>" in refused.text


def test_the_rounds_agent_is_made_for_the_plans_sandbox_kind():
    plan = QuickstartPlan(
        run="q", model_dir=Path("/m"), tasks=[], database_url="sqlite://", harness="pi", sandbox=KINDS["docker"]
    )
    agent = create_agent(plan)
    assert agent.kind.runs_images and agent.command("hi", endpoint_stub())[0] == agent.executable


def endpoint_stub():
    from harnesses.agents.cli_agent import Endpoint

    return Endpoint(base_url="http://127.0.0.1:8000/r/t/v1", api_key="t", model="policy", home="/home/agent")

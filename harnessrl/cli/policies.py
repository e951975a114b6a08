"""`harnessrl demo-policies`: several agents' harness adapters trained at once on one engine
(``harnessrl.training.policies_demo``)."""

from __future__ import annotations

from typing import Annotated

import typer

from harnesses.registry import agent_names, harness_help
from harnessrl.cli.options import (
    AdminKey,
    DatabaseUrl,
    checked_policy,
    console,
    fail,
    resolve_admin_key,
    resolve_database_url,
)


def demo_policies(
    agents: Annotated[
        str, typer.Option(help="Comma-separated agents, one policy each: two or more of " + harness_help(agent_names()))
    ] = "pi,builtin",
    minutes: Annotated[float, typer.Option(min=1.0, help="Each agent's quickstart time budget")] = 20.0,
    database_url: DatabaseUrl = None,
    admin_key: AdminKey = None,
) -> None:
    """One `harnessrl serve` and one quickstart per agent through it: every agent's adapter trained at once
    on one engine; prints each policy's held-out pass@1 before and after, the engine's memory and the share
    of calls its own adapter served."""
    from harnessrl.settings import data_home
    from harnessrl.training.policies_demo import DemoPlan, base_model, run_demo

    chosen = tuple(a.strip() for a in agents.split(",") if a.strip())
    unknown = [a for a in chosen if a not in agent_names()]
    if len(set(chosen)) < 2 or unknown:
        raise fail(f"--agents names two or more of {', '.join(agent_names())} (unknown: {unknown or 'none'})")
    for agent in chosen:
        checked_policy(agent)
    plan = DemoPlan(
        agents=chosen,
        minutes=minutes,
        model_dir=base_model(chosen),
        database_url=resolve_database_url(database_url),
        admin_key=resolve_admin_key(admin_key, create=True),
        home=data_home() / "demo-policies",
    )
    run_demo(plan, console)

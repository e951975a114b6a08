"""The harnesses by name, in one place: the CLI's help and checks, evaluation, the policies demo, the
agents' images and the task images read them here.

- ``builtin``: harnessrl's own tool loop; ``oneshot``: the same agent with one short reply and no
  tools (how quickstart runs the arithmetic family, and how ``eval --harness oneshot`` grades it);
- the CLI agents (``cli_agents()``): the classes in ``AGENTS`` (``harnesses/agents/__init__.py``), run
  unmodified, each with an image (``docker/Dockerfile.<name>``) and a task-image layer
  (``docker/Dockerfile.task-<name>``); a new agent is one class added there;
- ``oracle`` and ``nop``: a task's reference solution and doing nothing (``harnessrl tasks check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harnesses.harness import Harness
    from sandboxes.kinds import Kind

BUILTIN = "builtin"
ONESHOT = "oneshot"
CHECKS = ("oracle", "nop")


def cli_agents() -> tuple[str, ...]:
    """The CLI agents' names, as ``AGENTS`` registers them (read when asked: a registration counts)."""
    from harnesses.agents import AGENTS

    return tuple(AGENTS)


def agent_names() -> list[str]:
    """The harnesses a policy trains with: the builtin agent and the CLI agents."""
    return [BUILTIN, *cli_agents()]


def mcp_agents() -> list[str]:
    """The CLI agents that take tools over MCP (``supports_mcp``): those an OpenEnv task runs besides builtin."""
    from harnesses.agents import AGENTS

    return [name for name, agent in AGENTS.items() if getattr(agent, "supports_mcp", False)]


def harness_names() -> list[str]:
    return [BUILTIN, *cli_agents(), ONESHOT, *CHECKS]


def harness_help(names: list[str] | tuple[str, ...] | None = None) -> str:
    """``names`` (default: every harness) as CLI help writes a choice."""
    return " | ".join(names or harness_names())


def create_harness(name: str, sandbox: Kind | str = "local") -> Harness:
    """The harness for ``name``; CLI agents are set up for the sandbox kind they will run in."""
    if name in (BUILTIN, ONESHOT):
        from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness

        return BuiltinHarness(ONE_SHOT if name == ONESHOT else None)
    if name in CHECKS:
        from harnesses.agents.oracle import NopHarness, OracleHarness

        return OracleHarness() if name == "oracle" else NopHarness()
    if name in cli_agents():
        from harnesses import agents  # the CLI agents' harnesses

        return agents.create(name, sandbox=sandbox)
    raise ValueError(f"unknown harness {name!r}; choose one of {', '.join(harness_names())}")

"""The harnesses by name: the one list that the CLI's help and checks, evaluation, the agents' images
and the task images read.

- ``builtin``: harnessrl's own tool loop; ``oneshot``: the same agent with one short reply and no
  tools (how quickstart runs the arithmetic family, and how ``eval --harness oneshot`` grades it);
- the CLI agents (``CLI_AGENTS``, ``harnesses/agents/``), run unmodified, each with an image
  (``docker/Dockerfile.<name>``) and a task-image layer (``docker/Dockerfile.task-<name>``);
- ``oracle`` and ``nop``: a task's reference solution and doing nothing (``harnessrl tasks check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harnesses.harness import Harness

CLI_AGENTS = ("opencode", "pi", "hermes", "claude-code", "codex", "qwen-code")
CHECKS = ("oracle", "nop")


def harness_names() -> list[str]:
    return ["builtin", *CLI_AGENTS, "oneshot", *CHECKS]


def harness_help(names: list[str] | tuple[str, ...] | None = None) -> str:
    """``names`` (default: every harness) as CLI help writes a choice."""
    return " | ".join(names or harness_names())


def create_harness(name: str, sandbox: str = "local") -> Harness:
    """The harness for ``name``; CLI agents are set up for the sandbox kind they will run in."""
    if name in ("builtin", "oneshot"):
        from harnesses.builtin_agent import ONE_SHOT, BuiltinHarness

        return BuiltinHarness(ONE_SHOT if name == "oneshot" else None)
    if name in CHECKS:
        from harnesses.agents.oracle import NopHarness, OracleHarness

        return OracleHarness() if name == "oracle" else NopHarness()
    if name in CLI_AGENTS:
        from harnesses import agents  # the CLI agents' harnesses

        return agents.create(name, sandbox=sandbox)
    raise ValueError(f"unknown harness {name!r}; choose one of {', '.join(harness_names())}")

"""Harness adapters by name."""

from __future__ import annotations

from harnesses.adapter import Harness
from harnesses.builtin_agent import BuiltinHarness


def harness_names() -> list[str]:
    return ["builtin", "opencode", "pi", "hermes", "claude-code", "codex", "oracle", "nop"]


def create_harness(name: str, sandbox: str = "local") -> Harness:
    """The adapter for ``name``; CLI agents are set up for the sandbox kind they will run in."""
    if name == "builtin":
        return BuiltinHarness()
    if name in ("oracle", "nop"):  # the reference solution, and doing nothing (harnessrl tasks check)
        from harnesses.agents.oracle import NopHarness, OracleHarness

        return OracleHarness() if name == "oracle" else NopHarness()
    if name in harness_names()[1:]:
        from harnesses import agents  # the CLI agents' adapters

        return agents.create(name, sandbox=sandbox)
    raise ValueError(f"unknown harness {name!r}; choose one of {', '.join(harness_names())}")

"""Harnesses for the real CLI coding agents: OpenCode, pi, Hermes, Claude Code, Codex CLI and Qwen
Code (see `cli_agent`).

harness = create("opencode", sandbox="docker")   # image harnessrl/opencode:latest
harness = create("pi")                           # local sandbox: the host's install, read-only
"""

from __future__ import annotations

from harnesses.agents.claude_code import ClaudeCodeHarness
from harnesses.agents.cli_agent import AgentNotInstalled, AgentSettings, CliAgentHarness
from harnesses.agents.codex import CodexHarness
from harnesses.agents.hermes import HermesHarness
from harnesses.agents.opencode import OpenCodeHarness
from harnesses.agents.pi import PiHarness
from harnesses.agents.qwen_code import QwenCodeHarness
from sandboxes.kinds import Kind

# The one list of CLI agents, by each class's own name (harnesses.registry reads it): a new agent is one entry.
AGENTS: dict[str, type[CliAgentHarness]] = {
    harness.name: harness
    for harness in (OpenCodeHarness, PiHarness, HermesHarness, ClaudeCodeHarness, CodexHarness, QwenCodeHarness)
}

__all__ = [
    "AGENTS",
    "AgentNotInstalled",
    "AgentSettings",
    "ClaudeCodeHarness",
    "CliAgentHarness",
    "CodexHarness",
    "HermesHarness",
    "OpenCodeHarness",
    "PiHarness",
    "QwenCodeHarness",
    "create",
]


def create(name: str, sandbox: Kind | str = "local", settings: AgentSettings | None = None) -> CliAgentHarness:
    """The harness of agent ``name``, for sandboxes of kind ``sandbox`` (``sandboxes.kinds``)."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; choose one of {', '.join(AGENTS)}")
    return AGENTS[name](sandbox=sandbox, settings=settings)

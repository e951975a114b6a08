"""The harness protocol: how one agent (a harness: opencode, pi, Claude Code, ...) is configured, run and
observed in a sandbox. ("Adapter" in harnessrl means the LoRA weights trained for a harness.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from harnesses.task import Task
from sandboxes import Sandbox, SandboxSpec


@dataclass(frozen=True)
class RolloutTarget:
    """Where an agent sends its calls: the rollout's gateway base URL and token."""

    base_url: str  # http://GW/r/<token>/v1, as seen from the host
    token: str
    model: str = "policy"
    tools: bool = False  # the rollout has an MCP tool server at <base_url>/tools/mcp (gateway/api/rollout_tools.py)


@dataclass(frozen=True)
class AgentOutcome:
    final_text: str  # the agent's last answer ("" when it has none); saved to /logs/agent/final.txt
    log: str  # the agent's own output (tail), for debugging
    exit_code: int  # 0 when the agent ended normally
    timed_out: bool = False


class Harness(Protocol):
    """One agent plugged into harnessrl (harnesses/agents/*, harnesses.builtin_agent)."""

    name: str
    # Side calls the gateway should tag for this agent: tag -> regex over its instructions.
    side_call_patterns: dict[str, str]

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        """The sandbox this agent needs for ``task`` (image, env, read-only installs)."""

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        """Run the agent on the task until it stops or ``timeout_s`` passes."""

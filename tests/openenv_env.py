"""A small OpenEnv environment for the tests, built on openenv.core.env_server and served for real.

Tasks (the Task API, split ``train``): add two numbers with the ``add`` tool and ``submit`` the sum.
The reward is the environment's own: 1.0 when the submitted answer is the sum, else 0.0, set on the
observation of the ``submit`` call, which also ends the episode. Every tool call is counted in the
environment's state (``step_count``) and, where ``ADDER_LOG`` names a file, appended to it, so a test
can see the agent's calls reached the environment.

Serve: ``python -m harnesses.openenv.serve tests.openenv_env:AdderEnvironment --port PORT``.
"""

from __future__ import annotations

import os

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Observation, State

TASKS = [
    {
        "id": "add-2-3",
        "instruction": "Use the add tool to compute 2 + 3, then call submit with the result.",
        "a": 2,
        "b": 3,
    },
    {
        "id": "add-40-2",
        "instruction": "Use the add tool to compute 40 + 2, then call submit with the result.",
        "a": 40,
        "b": 2,
    },
]


def logged(call: str) -> None:
    if path := os.environ.get("ADDER_LOG"):
        with open(path, "a") as file:
            file.write(call + "\n")


class AdderEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("adder")
        self._task, self._reward, self._calls = TASKS[0], None, 0

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Adds two integers and returns the sum."""
            self._calls += 1
            logged(f"add({a}, {b})")
            return a + b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submits the final answer; ends the episode."""
            self._calls += 1
            logged(f"submit({answer})")
            self._reward = 1.0 if answer == self._task["a"] + self._task["b"] else 0.0
            return "submitted"

        super().__init__(mcp)

    def list_splits(self) -> list[str]:
        return ["train"]

    def list_tasks(self, split: str) -> list[dict]:
        return list(TASKS) if split == "train" else []

    def num_tasks(self, split: str) -> int:
        return len(self.list_tasks(split))

    def get_task(self, split: str, index: int) -> dict:
        return self.list_tasks(split)[index]

    def reset(self, seed=None, episode_id=None, split: str = "train", index: int = 0, **kwargs) -> Observation:
        self._task, self._reward, self._calls = TASKS[index], None, 0
        return Observation(metadata={"task": self._task["id"]})

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(metadata={"error": f"unknown action {type(action).__name__}"})

    def _scored(self, action, observation: Observation) -> Observation:
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            observation.reward, observation.done = self._reward, True
        return observation

    def step(self, action, timeout_s=None, **kwargs) -> Observation:
        return self._scored(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action, timeout_s=None, **kwargs) -> Observation:
        return self._scored(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    @property
    def state(self) -> State:
        return State(step_count=self._calls)

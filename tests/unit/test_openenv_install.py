"""openenv and gradio are installed without their declared caps; everything else they require holds, and
the MCP stack is the one vLLM needs (mcp 2)."""

from __future__ import annotations

from importlib.metadata import distribution, version

from packaging.requirements import Requirement
from packaging.version import Version

# The caps left out on purpose (pyproject.toml): what each requires that vLLM's environment refuses.
WAIVED = {"openenv": {"fastmcp"}, "gradio": {"pillow"}}


def unmet(package: str) -> list[str]:
    """The requirements of ``package`` (no extras) that the installed environment does not meet."""
    missing = []
    for text in distribution(package).requires or []:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.name.lower() in WAIVED.get(package, set()):
            continue
        try:
            installed = version(requirement.name)
        except Exception:
            missing.append(f"{requirement} (not installed)")
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            missing.append(f"{requirement} (have {installed})")
    return missing


def test_openenv_and_gradio_have_everything_but_the_waived_caps():
    assert version("openenv") == "0.10.0"
    assert unmet("openenv") == [] and unmet("gradio") == []


def test_the_mcp_stack_is_the_one_vllm_needs():
    assert Version(version("mcp")).major == 2 and Version(version("fastmcp")).major == 4


def test_openenv_mcp_environments_run_on_this_stack():
    from fastmcp import FastMCP
    from openenv.core.env_server.mcp_environment import MCPEnvironment
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    mcp = FastMCP("adder")

    @mcp.tool
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    class Adder(MCPEnvironment):
        def reset(self, seed=None, episode_id=None, **kwargs):
            from openenv.core.env_server.types import Observation

            return Observation()

        def _step_impl(self, action, timeout_s=None, **kwargs):
            raise NotImplementedError

        @property
        def state(self):
            from openenv.core.env_server.types import State

            return State()

    env = Adder(mcp)
    assert [t.name for t in env.step(ListToolsAction()).tools] == ["add"]
    assert env.step(CallToolAction(tool_name="add", arguments={"a": 2, "b": 3})).result.data == 5

"""Hermes Agent (`hermes-agent` on PyPI, in its own venv): one `hermes --oneshot` per rollout.

Config: `$HERMES_HOME/config.yaml` (written as JSON, which is YAML) with a `custom` provider at the
gateway. Hermes refuses models under 64K context, so `context_length` is stated (the gateway still
enforces the engine's limit), and `max_tokens` is stated because it otherwise asks for 65,536.
Its auxiliary side calls (session titles, context compression) are pointed at the gateway too, so
they are recorded and tagged; `AgentSettings(side_calls=False)` switches both off instead.

Tools: on an OpenEnv task the rollout's tool server (`<base URL>/tools/mcp`, relayed by the gateway to
the environment) is an HTTP server under `mcp_servers` (Hermes's `mcp` extra, in the image and the install hint).

Output: one-shot mode prints only the final answer on stdout; approvals are bypassed (and `--yolo`
says so explicitly for versions that still ask).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from harnesses.agents.cli_agent import (
    AgentNotInstalled,
    CliAgentHarness,
    Endpoint,
    HostInstall,
    ShellTool,
    install_prefix,
)

VERSION = "0.19.0"
MCP_SERVER = "env"  # the rollout's tool server (OpenEnv tasks): Hermes names its tools mcp__env__<tool>
MCP_TIMEOUT_S = 300  # per tool call (tools/mcp_tool.py's default too)
VENV = "/opt/hermes"  # where the install hint, .ci/run and the image put it
# agent/title_generator.py and agent/context_compressor.py
SIDE_CALLS = {
    "title": r"Generate a short, descriptive title \(3-7 words\) for a conversation",
    "summary": r"You are a summarization agent creating a context checkpoint",
}


class HermesHarness(CliAgentHarness):
    name = "hermes"
    supports_mcp = True  # `mcp_servers` in its config; their tools are named mcp__<server>__<tool>
    executable = "hermes"
    install_hint = f"python3 -m venv {VENV} && {VENV}/bin/pip install 'hermes-agent[mcp]=={VERSION}'"
    shell_tool = ShellTool("terminal")
    first_prompt_tokens = 13_100  # its first prompt (tools included), SmolLM2's tokenizer: fixtures
    side_call_patterns = SIDE_CALLS

    def hermes_home(self, endpoint: Endpoint) -> str:
        return f"{endpoint.home}/.hermes"

    def config(self, endpoint: Endpoint) -> dict:
        gateway = {"base_url": endpoint.base_url, "api_key": endpoint.api_key}
        side_calls = self.settings.side_calls
        return {
            "model": {
                "provider": "custom",
                "default": endpoint.model,
                **gateway,
                "context_length": self.settings.context_length,
                "max_tokens": self.settings.max_tokens,
            },
            "auxiliary": {
                "title_generation": {"enabled": side_calls, "provider": "custom", "model": endpoint.model, **gateway},
                "compression": {
                    "provider": "custom",
                    "model": endpoint.model,
                    **gateway,
                    "context_length": self.settings.context_length,
                },
            },
            "compression": {"enabled": side_calls},
            **(
                {
                    "mcp_servers": {
                        MCP_SERVER: {
                            "url": endpoint.mcp_url,
                            "timeout": MCP_TIMEOUT_S,
                            "headers": {"Authorization": f"Bearer {endpoint.api_key}"},
                        }
                    }
                }
                if endpoint.tools
                else {}
            ),
        }

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        text = "# written by harnessrl for one rollout (JSON is YAML)\n" + json.dumps(self.config(endpoint), indent=2)
        return {f"{self.hermes_home(endpoint)}/config.yaml": text.encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "HERMES_HOME": self.hermes_home(endpoint),
            "HERMES_DISABLE_LAZY_INSTALLS": "1",
        }  # no pip installs at run time (no network anyway)

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        # "--oneshot=TEXT", not "-z TEXT": an instruction starting with "-" stays the value.
        return [f"--oneshot={instruction}", "--yolo"]

    def final_text(self, stdout: str) -> str:
        return stdout.strip()

    def host_install(self) -> HostInstall:
        command = _hermes_on_host()
        venv = install_prefix(command)
        # A venv's python is a symlink to the interpreter it was made from: show that install too.
        paths = (str(venv), str(install_prefix(venv / "bin" / "python3")))
        return HostInstall((os.path.realpath(command),), paths)


def _hermes_on_host() -> Path:
    """`hermes` of the venv in $HERMES_VENV, else the one on PATH, else /opt/hermes's."""
    venv = os.environ.get("HERMES_VENV")
    for found in (venv and f"{venv}/bin/hermes", shutil.which("hermes"), f"{VENV}/bin/hermes"):
        if found and Path(found).exists():
            return Path(found)
    raise AgentNotInstalled(
        f"hermes not found: {HermesHarness.install_hint}, or use the docker sandbox with `harnessrl images build`"
    )

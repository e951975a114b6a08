"""OpenCode (`opencode-ai` on npm): one `opencode run` per rollout, events as JSON lines.

Config: a JSON file named by OPENCODE_CONFIG with our own provider on `@ai-sdk/openai-compatible`
(bundled in the binary, nothing fetched) and every permission allowed: the sandbox is the boundary,
and a permission prompt nobody answers is an auto-reject that ends the run. `small_model` is the
policy too, so OpenCode's side calls (session title, summaries) also reach the gateway, where the
patterns below tag them. At start OpenCode also installs its plugin SDK from npm into the config
folder, in the background; in a sandbox that fails quietly (a warning in its own log).

Tools: on an OpenEnv task the rollout's tool server (`<base URL>/tools/mcp`, relayed by the gateway to
the environment) is a remote MCP server in the config, `oauth: false` (no discovery requests).

Output: `--format json` prints one event per line; `{"type": "text", "part": {"text": ...}}` events
carry the assistant's text, the last one is its final answer.
"""

from __future__ import annotations

import json

from harnesses.agents.cli_agent import (
    PROVIDER_ID,
    CliAgentHarness,
    Endpoint,
    HostInstall,
    ShellTool,
    package_root,
    which,
)

VERSION = "1.18.33"
MCP_SERVER = "env"  # the rollout's tool server (OpenEnv tasks): OpenCode names its tools env_<tool>
MCP_TIMEOUT_MS = 120_000  # per MCP request (its default, 5 s, is less than an environment's step may take)
PERMISSIONS = ("edit", "bash", "webfetch", "external_directory", "doom_loop")
# Prompts from the opencode binary (grep it for "title generator"): the title agent's system prompt,
# the session summary and the compaction agent.
SIDE_CALLS = {
    "title": r"You are a title generator|Generate a title for this conversation",
    "summary": r"Summarize what was done in this conversation|You are a context summarization agent",
}


class OpenCodeHarness(CliAgentHarness):
    name = "opencode"
    supports_mcp = True  # `mcp` servers in its config; their tools are named <server>_<tool>
    executable = "opencode"
    install_hint = f"npm install -g opencode-ai@{VERSION}"
    shell_tool = ShellTool("bash", fixed=(("description", "Run the commands"),))
    first_prompt_tokens = 7_700  # its first prompt (tools included), SmolLM2's tokenizer: fixtures
    side_call_patterns = SIDE_CALLS

    def config_path(self, endpoint: Endpoint) -> str:
        return f"{endpoint.xdg['XDG_CONFIG_HOME']}/opencode/opencode.json"

    def config(self, endpoint: Endpoint) -> dict:
        model = {
            "name": endpoint.model,
            "tool_call": True,
            "limit": {"context": self.settings.context_length, "output": self.settings.max_tokens},
        }
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "harnessrl gateway",
            "options": {"baseURL": endpoint.base_url, "apiKey": endpoint.api_key},
            "models": {endpoint.model: model},
        }
        mcp = (
            {
                MCP_SERVER: {
                    "type": "remote",
                    "url": endpoint.mcp_url,
                    "enabled": True,
                    "oauth": False,
                    "headers": {"Authorization": f"Bearer {endpoint.api_key}"},
                    "timeout": MCP_TIMEOUT_MS,
                }
            }
            if endpoint.tools
            else {}
        )
        return {
            "$schema": "https://opencode.ai/config.json",
            **({"mcp": mcp} if mcp else {}),
            "provider": {PROVIDER_ID: provider},
            "enabled_providers": [PROVIDER_ID],
            "model": f"{PROVIDER_ID}/{endpoint.model}",
            "small_model": f"{PROVIDER_ID}/{endpoint.model}",
            "autoupdate": False,
            "share": "disabled",
            "permission": {name: "allow" for name in PERMISSIONS},
        }

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        return {self.config_path(endpoint): json.dumps(self.config(endpoint), indent=2).encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "OPENCODE_CONFIG": self.config_path(endpoint),
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",  # models.dev: no network, and our model is in the config
            "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",  # else it fetches plugins from the npm registry
            "OPENCODE_DISABLE_SHARE": "1",
        }

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        return ["run", "-m", f"{PROVIDER_ID}/{endpoint.model}", "--format", "json", "--", instruction]

    def final_text(self, stdout: str) -> str:
        texts = [
            event["part"]["text"]
            for event in _events(stdout)
            if event.get("type") == "text" and isinstance(event.get("part"), dict)
        ]
        return texts[-1].strip() if texts else ""

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        # The npm package holds the native binary (bin/opencode.exe) and its platform packages.
        return HostInstall((str(command),), (str(command), str(package_root(command))))


def _events(stdout: str) -> list[dict]:
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a log line that happens to start with a brace
            if isinstance(event, dict):
                events.append(event)
    return events

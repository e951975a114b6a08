"""Codex CLI (`@openai/codex` on npm): one `codex exec` per rollout, events as JSON lines.

Config: `$CODEX_HOME/config.toml` with our own model provider on the Responses API (`wire_api =
"responses"`, the only one Codex speaks) at the rollout's URL, the rollout token in an environment
variable the provider names (`env_key`). The model's context window and compaction threshold are
stated: an unknown model name otherwise gets fallback metadata. Update checks, analytics, feedback
and history files are off. Codex's own sandbox and approvals are bypassed: the harnessrl sandbox is
the boundary (and has no network besides the gateway). Codex sends no output cap (no setting for
one), so a call may generate up to the engine's context limit.

Output: `--json` prints one event per line; `item.completed` events of type `agent_message` carry the
assistant's text, the last one is its final answer.

Side calls: `codex exec` sends its main loop, with tools, and one side call: context compaction (the
local kind: our provider is not OpenAI's, which compacts on its own endpoint). It runs when the last
response's usage (`total_tokens`, which the gateway counts with the tokenizer) reaches
min(`model_auto_compact_token_limit`, 90% of `model_context_window`), and sends the history without
tools, its prompt as the last user message: declared below, so it is tagged. The next main-loop
call starts from the summary (a new root of the call graph).
"""

from __future__ import annotations

import json
import os

from harnesses.agents.cli_agent import (
    PROVIDER_ID,
    CliAgentHarness,
    Endpoint,
    HostInstall,
    ShellTool,
    install_prefix,
    package_root,
    which,
)

VERSION = "0.171.0"
API_KEY_ENV = "HARNESSRL_API_KEY"
SIDE_CALLS = {"summary": r"You are performing a CONTEXT CHECKPOINT COMPACTION"}
COMPACT_AT = 0.9  # of the context window


class CodexHarness(CliAgentHarness):
    name = "codex"
    executable = "codex"
    install_hint = f"npm install -g @openai/codex@{VERSION}"
    shell_tool = ShellTool("exec_command", "cmd")
    first_prompt_tokens = 9_500  # its first prompt (tools included), SmolLM2's tokenizer: fixtures
    side_call_patterns = SIDE_CALLS

    def codex_home(self, endpoint: Endpoint) -> str:
        return f"{endpoint.home}/.codex"

    def config_toml(self, endpoint: Endpoint) -> str:
        window = self.settings.context_length
        provider = {
            "name": "harnessrl gateway",
            "base_url": endpoint.base_url,
            "env_key": API_KEY_ENV,
            "wire_api": "responses",
            "request_max_retries": 1,
            "stream_max_retries": 1,
        }
        lines = [
            "# written by harnessrl for one rollout",
            f"model = {_toml(endpoint.model)}",
            f"model_provider = {_toml(PROVIDER_ID)}",
            f"model_context_window = {window}",
            f"model_auto_compact_token_limit = {int(window * COMPACT_AT)}",
            "check_for_update_on_startup = false",
            'approval_policy = "never"',
            'sandbox_mode = "danger-full-access"',
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[feedback]",
            "enabled = false",
            "",
            "[history]",
            'persistence = "none"',
            "",
            f"[model_providers.{PROVIDER_ID}]",
        ]
        lines += [f"{key} = {_toml(value)}" for key, value in provider.items()]
        return "\n".join(lines) + "\n"

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        return {f"{self.codex_home(endpoint)}/config.toml": self.config_toml(endpoint).encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {"CODEX_HOME": self.codex_home(endpoint), API_KEY_ENV: endpoint.api_key}

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        return [
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "--json",
            "--color",
            "never",
            "--model",
            endpoint.model,
            "--",
            instruction,
        ]

    def final_text(self, stdout: str) -> str:
        texts = []
        for line in stdout.splitlines():
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            item = event.get("item") if isinstance(event, dict) else None
            if event.get("type") == "item.completed" and isinstance(item, dict) and item.get("type") == "agent_message":
                texts.append(str(item.get("text") or ""))
        return texts[-1].strip() if texts else ""

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        node = which("node", f"install Node.js and then {self.install_hint}")
        script = os.path.realpath(command)  # bin/codex.js starts the platform package's native binary
        return HostInstall((str(node), script), (script, str(package_root(command)), str(install_prefix(node))))


def _toml(value) -> str:
    """A TOML scalar: JSON's string escapes are TOML's basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))

"""pi (`@mariozechner/pi-coding-agent` on npm): one `pi -p` per rollout, its final answer on stdout.

Config: `models.json` in PI_CODING_AGENT_DIR with our own provider speaking `openai-completions`;
`compat` turns off the developer role and reasoning effort, which OpenAI-compatible servers other
than OpenAI reject. `--offline` and PI_OFFLINE skip its startup network calls, `--no-session` its
session files.

Output: print mode's text output, which is the final assistant message's text (errors go to stderr
with exit code 1). Not `--mode json`: its `message_update` events repeat the whole partial message
at every streamed delta, megabytes for one long answer, and a sandbox keeps only the first 16 MB.

Side calls: pi makes none in a short run; its context compaction and branch summaries use the
summarization system prompt matched below.
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

VERSION = "0.73.1"
SIDE_CALLS = {"summary": r"You are a context summarization assistant"}  # dist/core/compaction/utils.js


class PiHarness(CliAgentHarness):
    name = "pi"
    executable = "pi"
    install_hint = f"npm install -g @mariozechner/pi-coding-agent@{VERSION}"
    shell_tool = ShellTool("bash")
    first_prompt_tokens = 1_400  # its first prompt (tools included), SmolLM2's tokenizer: fixtures
    side_call_patterns = SIDE_CALLS

    def agent_dir(self, endpoint: Endpoint) -> str:
        return f"{endpoint.home}/.pi/agent"

    def models(self, endpoint: Endpoint) -> dict:
        model = {
            "id": endpoint.model,
            "name": endpoint.model,
            "reasoning": False,
            "input": ["text"],
            "contextWindow": self.settings.context_length,
            "maxTokens": self.settings.max_tokens,
        }
        provider = {
            "baseUrl": endpoint.base_url,
            "api": "openai-completions",
            "apiKey": endpoint.api_key,
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [model],
        }
        return {"providers": {PROVIDER_ID: provider}}

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        return {f"{self.agent_dir(endpoint)}/models.json": json.dumps(self.models(endpoint), indent=2).encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "PI_CODING_AGENT_DIR": self.agent_dir(endpoint),
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
        }

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        # pi reads an argument starting with "-" as a flag and "@" as a file to attach.
        message = "\n" + instruction if instruction.startswith(("-", "@")) else instruction
        return ["--offline", "--provider", PROVIDER_ID, "--model", endpoint.model, "--no-session", "-p", message]

    def final_text(self, stdout: str) -> str:
        return stdout.strip()

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        node = which("node", f"install Node.js >= 20 and then {self.install_hint}")
        script = os.path.realpath(command)  # run by node itself: `env node` may not find it inside
        return HostInstall((str(node), script), (script, str(package_root(command)), str(install_prefix(node))))

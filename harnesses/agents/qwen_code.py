"""Qwen Code (`@qwen-code/qwen-code` on npm): one headless `qwen --prompt=...` per rollout, its answer on stdout.

One of the agents Harbor installs into a task's environment (harbor/agents/installed/), run here as a
harness of our own: it speaks Chat Completions to the rollout's gateway URL like any other agent.

Config: the command line selects its OpenAI-compatible auth and the model, and approves every tool
call (`--approval-mode yolo`: the harnessrl sandbox is the boundary). `$QWEN_HOME/settings.json`
(QWEN_HOME is `~/.qwen`) states the model's context window and what is off. The gateway URL and the
rollout token are environment variables (OPENAI_BASE_URL, OPENAI_API_KEY), which win over a `.env`
file a task's workspace may hold; QWEN_CODE_MAX_OUTPUT_TOKENS caps each main-loop call (it otherwise
asks for 32,000). Turned off: usage statistics (Aliyun RUM: the one host a short run tries to reach
besides the gateway), telemetry, auto-update, chat recording, other sessions' messages over a local
socket, and managed auto-memory (background extraction and consolidation runs that call the model
with the main loop's tools, untagged, and write memories under ~/.qwen).

Output: text mode prints the final assistant message (errors too, as `[API Error: ...]`, with exit
code 1). The instruction goes in `--prompt=` so one starting with "-" stays text; one starting with
"/" would run a slash command, so it is sent after a newline.

Node.js: the package declares Node >= 22 (the images carry 22); its headless mode also runs on the
Node 20 this project's hosts have (what a local sandbox uses).

Side calls: in a headless run Qwen Code sends its main loop, and one side call: chat compression,
when the history nears the stated context window. It sends the conversation with the summarizer's
system prompt below, without tools (or, sharing the prompt cache, the main loop's request with that
prompt opening the last user message): declared, so it is tagged. Its session titles and tool-use
summaries need a "fast model", which is not configured: they are never sent.
"""

from __future__ import annotations

import json
import os

from harnesses.agents.cli_agent import (
    CliAgentHarness,
    Endpoint,
    HostInstall,
    ShellTool,
    install_prefix,
    package_root,
    which,
)

VERSION = "0.24.4"
SIDE_CALLS = {"summary": r"You are the component that summarizes a conversation"}  # getCompressionPrompt()


class QwenCodeHarness(CliAgentHarness):
    name = "qwen-code"
    executable = "qwen"
    install_hint = f"npm install -g @qwen-code/qwen-code@{VERSION}"
    shell_tool = ShellTool("run_shell_command")
    first_prompt_tokens = 17_300  # its first prompt (14 tools, skills listed), SmolLM2's tokenizer: fixtures
    side_call_patterns = SIDE_CALLS

    def qwen_home(self, endpoint: Endpoint) -> str:
        return f"{endpoint.home}/.qwen"

    def settings_json(self, endpoint: Endpoint) -> dict:
        return {
            "model": {"name": endpoint.model, "generationConfig": {"contextWindowSize": self.settings.context_length}},
            "general": {"enableAutoUpdate": False, "chatRecording": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False, "enableAutoSkill": False},
            "agents": {"crossSessionMessaging": False},
        }

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        settings = json.dumps(self.settings_json(endpoint), indent=2).encode()
        return {f"{self.qwen_home(endpoint)}/settings.json": settings}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "QWEN_HOME": self.qwen_home(endpoint),
            "OPENAI_BASE_URL": endpoint.base_url,
            "OPENAI_API_KEY": endpoint.api_key,
            "QWEN_CODE_MAX_OUTPUT_TOKENS": str(self.settings.max_tokens),
            "QWEN_USAGE_STATISTICS_ENABLED": "false",
            "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
        }

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        message = "\n" + instruction if instruction.startswith("/") else instruction
        return ["--approval-mode", "yolo", "--auth-type", "openai", "--model", endpoint.model, f"--prompt={message}"]

    def final_text(self, stdout: str) -> str:
        return stdout.strip()

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        node = which("node", f"install Node.js >= 20 and then {self.install_hint}")
        script = os.path.realpath(command)  # cli-entry.js, run by node itself (it starts cli.js the same way)
        return HostInstall((str(node), script), (script, str(package_root(command)), str(install_prefix(node))))

"""Claude Code (`@anthropic-ai/claude-code` on npm): one `claude -p` per rollout, its result as JSON.

Config: environment variables (Claude Code reads no provider file). `ANTHROPIC_BASE_URL` is the
rollout's URL without `/v1` (the client appends `/v1/messages`), the rollout token is the API key,
and every model role (main, small/fast, subagents) is the policy, so side calls reach the gateway
too. The model's context window is stated (`CLAUDE_CODE_AUTO_COMPACT_WINDOW`: an unknown model
name otherwise gets a default far beyond small engines) and so is the output cap. Telemetry, error
reporting, update checks, surveys and other non-essential traffic are off; the sandbox has no
network besides the gateway anyway. Permissions are bypassed (the sandbox is the boundary); as root
that needs `IS_SANDBOX=1`.

Output: `--output-format json` prints one result object; its `result` is the final answer.

Side calls: in a print-mode run Claude Code sends its main loop, and one side call: context
compaction, when the conversation's token count (from the usage the gateway returns) reaches the
auto-compact window less min(output cap, 20000) less 13000. The window is
CLAUDE_CODE_AUTO_COMPACT_WINDOW, which the binary raises to at least 100000: an engine with a
shorter context never sees a compaction (the agent runs into its context limit instead). The
compaction call carries the main loop's system prompt and tools (to share the prompt cache) and
asks for the summary in its last user message, which opens "CRITICAL: Respond with TEXT ONLY"; the
gateway tags a call with tools when that message opens with a declared pattern. (Its other variant,
without tools, has a system prompt of its own; both patterns below.) What else the binary can send
beside its main loop (session titles, prompt suggestions, away and agent summaries, memory
extraction) reached no engine in -p runs (they belong to its interactive mode): not declared.
"""

from __future__ import annotations

import json

from harnesses.agents.cli_agent import CliAgentHarness, Endpoint, HostInstall, ShellTool, package_root, which

VERSION = "2.1.332"
# The compaction prompts of the binary: the instruction (the last user message, opening with the first
# alternative, with one of three summary requests: the whole conversation, its recent part, or a
# prefix of it) and the system prompt of the variant sent without tools.
SIDE_CALLS = {
    "summary": r"CRITICAL: Respond with TEXT ONLY\. Do NOT call any tools|"
    r"You are a helpful AI assistant tasked with summarizing conversations|"
    r"Your task is to create a detailed summary of (the conversation so far|the RECENT portion|"
    r"this conversation)",
}
QUIET = (
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER",
    "DISABLE_BUG_COMMAND",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
)
MODEL_ROLES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


class ClaudeCodeHarness(CliAgentHarness):
    name = "claude-code"
    executable = "claude"
    install_hint = f"npm install -g @anthropic-ai/claude-code@{VERSION}"
    shell_tool = ShellTool("Bash", fixed=(("description", "Run the commands"),))
    first_prompt_tokens = 12_200  # its first prompt (tools included), SmolLM2's tokenizer: fixtures
    tokens_after_task = 2_300  # a system message after the task: environment, skills (fixtures)
    side_call_patterns = SIDE_CALLS

    def config_dir(self, endpoint: Endpoint) -> str:
        return f"{endpoint.home}/.claude"

    def settings_json(self) -> dict:
        return {
            "permissions": {"defaultMode": "bypassPermissions"},
            "autoUpdates": False,
            "includeCoAuthoredBy": False,
            "cleanupPeriodDays": 1,
        }

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        return {f"{self.config_dir(endpoint)}/settings.json": json.dumps(self.settings_json(), indent=2).encode()}

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": endpoint.base_url.removesuffix("/").removesuffix("/v1"),
            "ANTHROPIC_API_KEY": endpoint.api_key,
            **{role: endpoint.model for role in MODEL_ROLES},
            "CLAUDE_CONFIG_DIR": self.config_dir(endpoint),
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(self.settings.max_tokens),
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(self.settings.context_length),
            "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root inside the sandbox
            # Else the system prompt opens with a billing line holding a hash of the task's prompt: the
            # prefix every rollout shares would end a few tokens in.
            "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            **{name: "1" for name in QUIET},
        }

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        # An instruction starting with "-" would be read as a flag.
        message = "\n" + instruction if instruction.startswith("-") else instruction
        return ["-p", message, "--output-format", "json", "--model", endpoint.model, "--dangerously-skip-permissions"]

    def final_text(self, stdout: str) -> str:
        for line in reversed(stdout.strip().splitlines()):
            if line.startswith("{"):
                result = json.loads(line)
                if isinstance(result, dict) and result.get("type") == "result":
                    return str(result.get("result") or "").strip()
        return ""

    def host_install(self) -> HostInstall:
        command = which(self.executable, self.install_hint)
        # A native executable inside the npm package (bin/claude.exe).
        return HostInstall((str(command),), (str(command), str(package_root(command))))

"""The Claude Code and Codex adapters without the agents: configs, command lines, side calls, outcomes."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field

import pytest

from gateway.request.tagging import side_call_tags
from harnesses import images
from harnesses.agents import AgentSettings, create
from harnesses.agents.cli_agent import Endpoint
from harnesses.harness import RolloutTarget
from harnesses.registry import create_harness, harness_names
from harnesses.task import Task
from sandboxes import ExecResult

URL = "http://127.0.0.1:8123/r/hrl-secret/v1"
TOKEN = "hrl-secret"
ENDPOINT = Endpoint(URL, TOKEN, "policy", "/home/agent")
TASK = Task(name="t", instruction="Create hello.txt", verifier="true")
SETTINGS = AgentSettings(max_tokens=512, context_length=65536)
# Prompts as the binaries carry them (strings of the installed executables).
CLAUDE_COMPACTION = (
    "You are a helpful AI assistant tasked with summarizing conversations.",
    "Your task is to "
    "create a detailed summary of the conversation so far, paying close attention to the user's "
    "explicit requests and your previous actions.",
)
CLAUDE_ASK = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools."  # opens its compaction's user message
CODEX_COMPACTION = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM "
    "that will resume the task."
)
MAIN_LOOP = {
    "claude-code": "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
    "codex": "You are a coding agent running in the Codex CLI, a terminal-based coding assistant.",
}


def test_claude_code_points_every_model_role_at_the_gateway_with_the_token_and_limits():
    harness = create("claude-code", settings=SETTINGS)
    env = harness.env(ENDPOINT)
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8123/r/hrl-secret"  # the client appends /v1/messages
    assert env["ANTHROPIC_API_KEY"] == TOKEN
    for role in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    ):
        assert env[role] == "policy"
    assert (env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"], env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"]) == ("512", "65536")
    for quiet in (
        "DISABLE_TELEMETRY",
        "DISABLE_AUTOUPDATER",
        "DISABLE_ERROR_REPORTING",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    ):
        assert env[quiet] == "1"
    assert env["CLAUDE_CONFIG_DIR"] == "/home/agent/.claude" and env["HOME"] == "/home/agent"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"  # no per-task hash at the head of the prompt
    settings = json.loads(harness.config_files(ENDPOINT)["/home/agent/.claude/settings.json"])
    assert settings["permissions"] == {"defaultMode": "bypassPermissions"} and settings["autoUpdates"] is False


def test_codex_config_is_toml_with_our_responses_provider_and_the_context_window():
    harness = create("codex", settings=SETTINGS)
    config = tomllib.loads(harness.config_files(ENDPOINT)["/home/agent/.codex/config.toml"].decode())
    provider = config["model_providers"]["harnessrl"]
    assert (provider["base_url"], provider["wire_api"], provider["env_key"]) == (URL, "responses", "HARNESSRL_API_KEY")
    assert config["model"] == "policy" and config["model_provider"] == "harnessrl"
    assert config["model_context_window"] == 65536 and config["model_auto_compact_token_limit"] < 65536
    assert config["check_for_update_on_startup"] is False and config["analytics"] == {"enabled": False}
    assert config["history"] == {"persistence": "none"}
    env = harness.env(ENDPOINT)
    assert env["HARNESSRL_API_KEY"] == TOKEN and env["CODEX_HOME"] == "/home/agent/.codex"


def test_codex_config_quotes_a_hostile_model_name_instead_of_injecting_toml():
    endpoint = Endpoint(URL, TOKEN, 'policy"\n[model_providers.evil]\nbase_url = "http://attacker', "/home/agent")
    config = tomllib.loads(create("codex").config_toml(endpoint))
    assert set(config["model_providers"]) == {"harnessrl"} and config["model"] == endpoint.model


def test_an_instruction_that_looks_like_a_flag_stays_the_prompt():
    claude = create("claude-code").arguments("--help me", ENDPOINT)
    assert claude[claude.index("-p") + 1] == "\n--help me"
    assert create("codex").arguments("--help me", ENDPOINT)[-2:] == ["--", "--help me"]


def test_final_answers_are_parsed_from_each_agents_json_output():
    claude = json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "Done.\n"})
    assert create("claude-code").final_text(f"warning line\n{claude}\n") == "Done."
    codex = (
        "\n".join(
            json.dumps(e)
            for e in [
                {"type": "thread.started", "thread_id": "t"},
                {"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "First."}},
                {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "ls"}},
                {"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "Done."}},
                {"type": "turn.completed"},
            ]
        )
        + "\n{broken"
    )
    assert create("codex").final_text(codex) == "Done."
    assert create("claude-code").final_text("") == create("codex").final_text("") == ""


@pytest.mark.parametrize(("name", "prompts"), [("claude-code", CLAUDE_COMPACTION), ("codex", (CODEX_COMPACTION,))])
def test_side_call_patterns_tag_the_agents_compaction_and_not_its_main_loop(name, prompts):
    patterns = create(name).side_call_patterns
    for prompt in prompts:
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "the conversation"}]
        assert "summary" in side_call_tags(messages, False, tuple(patterns.items()))
    assert not any(re.search(p, MAIN_LOOP[name], re.IGNORECASE) for p in patterns.values())


def test_claude_code_compaction_with_the_main_loops_tools_is_tagged_and_the_main_loop_is_not():
    """Claude Code compacts with its main loop's system prompt and tools; its instruction opens the
    last user message. A main-loop call merely quoting it (not at the opening) stays untagged."""
    patterns = tuple(create("claude-code").side_call_patterns.items())
    ask = CLAUDE_ASK + "\n\n" + CLAUDE_COMPACTION[1]
    history = [
        {"role": "system", "content": MAIN_LOOP["claude-code"]},
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "Looking."},
    ]
    assert side_call_tags([*history, {"role": "user", "content": ask}], True, patterns) == ["summary"]
    assert side_call_tags([*history, {"role": "user", "content": [{"type": "text", "text": ask}]}], True, patterns) == [
        "summary"
    ]
    quoted = {"role": "user", "content": "Why did you print " + ask}
    assert side_call_tags([*history, quoted], True, patterns) == []
    assert side_call_tags(history, True, patterns) == []


def test_registry_and_images_know_the_new_agents():
    assert {"claude-code", "codex"} <= set(harness_names())
    assert create_harness("codex", "docker").image == "harnessrl/codex:latest"
    for name in ("claude-code", "codex"):
        text = images.dockerfile(name).read_text()
        assert "ARG BASE=debian:bookworm-slim\nFROM ${BASE}" in text and "COPY extra-ca/" in text
        version = __import__(f"harnesses.agents.{name.replace('-', '_')}", fromlist=["VERSION"]).VERSION
        assert f"={version}\n" in text  # the image pins the adapter's version


@dataclass
class FakeSandbox:
    result: ExecResult
    gateway_url_inside: str | None = URL
    files: dict = field(default_factory=dict)
    execs: list = field(default_factory=list)

    async def put_file(self, path, data, mode=0o644):
        self.files[path] = (data, mode)

    async def exec(self, command, timeout_s=None, env=None, cwd=None):
        self.execs.append((command, timeout_s, env))
        return ExecResult(0, b"/home/agent", b"", False, 0.01) if len(self.execs) == 1 else self.result


async def test_codex_run_writes_its_config_privately_and_runs_exec_under_the_timeout():
    stdout = json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "Done."}}).encode()
    sandbox = FakeSandbox(ExecResult(0, stdout, b"", False, 2.0))
    outcome = await create("codex", "docker").run(sandbox, TASK, RolloutTarget("http://host/r/x/v1", TOKEN), 77.0)
    data, mode = sandbox.files["/home/agent/.codex/config.toml"]
    assert mode == 0o600 and URL in data.decode()  # the URL as seen inside the sandbox
    command, timeout_s, env = sandbox.execs[1]
    assert command[:2] == ["codex", "exec"] and command[-1] == TASK.instruction and timeout_s == 77.0
    assert "--dangerously-bypass-approvals-and-sandbox" in command and env["CODEX_HOME"] == "/home/agent/.codex"
    assert (outcome.final_text, outcome.exit_code) == ("Done.", 0)

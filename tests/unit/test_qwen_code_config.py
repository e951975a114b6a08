"""The Qwen Code adapter without the agent: its settings, environment, command line, side calls, outcome."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gateway.request.tagging import side_call_tags
from harnesses import images
from harnesses.agents import AgentSettings, create
from harnesses.agents.cli_agent import Endpoint
from harnesses.agents.qwen_code import VERSION
from harnesses.harness import RolloutTarget
from harnesses.registry import create_harness
from harnesses.task import Task
from sandboxes import ExecResult
from tests.first_requests import load_first_request

URL = "http://127.0.0.1:8123/r/hrl-secret/v1"
TOKEN = "hrl-secret"
ENDPOINT = Endpoint(URL, TOKEN, "policy", "/home/agent")
TASK = Task(name="t", instruction="Create hello.txt", verifier="true")
SETTINGS = AgentSettings(max_tokens=512, context_length=65536)
# The opening of its compression prompt (getCompressionPrompt() in the package's bundle) and the
# request it closes the history with.
COMPRESSION = (
    "\nYou are the component that summarizes a conversation when its context window is about to overflow. "
    "The summary you produce will become the agent's ONLY memory of everything that happened before this point."
)
COMPRESSION_ASK = "First, reason in your <analysis> block. Then, produce the <state_snapshot> XML."


def test_its_settings_state_the_window_and_turn_off_what_reaches_past_the_gateway():
    harness = create("qwen-code", settings=SETTINGS)
    [(path, data)] = harness.config_files(ENDPOINT).items()
    assert path == "/home/agent/.qwen/settings.json"
    settings = json.loads(data)
    assert settings["model"] == {"name": "policy", "generationConfig": {"contextWindowSize": 65536}}
    assert settings["privacy"]["usageStatisticsEnabled"] is False and settings["telemetry"]["enabled"] is False
    assert settings["general"] == {"enableAutoUpdate": False, "chatRecording": False}
    assert not any(settings["memory"].values()) and settings["agents"]["crossSessionMessaging"] is False
    assert TOKEN not in data.decode()  # the token is in the environment, which a workspace .env cannot override


def test_its_environment_points_it_at_the_gateway_with_the_token_and_the_output_cap():
    env = create("qwen-code", settings=SETTINGS).env(ENDPOINT)
    assert (env["OPENAI_BASE_URL"], env["OPENAI_API_KEY"]) == (URL, TOKEN)
    assert env["QWEN_HOME"] == "/home/agent/.qwen" and env["HOME"] == "/home/agent"
    assert env["QWEN_CODE_MAX_OUTPUT_TOKENS"] == "512" and env["QWEN_USAGE_STATISTICS_ENABLED"] == "false"


def test_the_instruction_is_one_argument_and_never_a_flag_or_a_slash_command():
    harness = create("qwen-code")
    command = harness.arguments("--help me", ENDPOINT)
    assert command[-1] == "--prompt=--help me"
    assert ["--approval-mode", "yolo"] == command[:2] and "--model" in command
    assert harness.arguments("/init the repo", ENDPOINT)[-1] == "--prompt=\n/init the repo"
    assert harness.arguments("a // b", ENDPOINT)[-1] == "--prompt=a // b"


def test_its_compression_is_tagged_with_tools_or_without():
    patterns = tuple(create("qwen-code").side_call_patterns.items())
    history = [{"role": "user", "content": [{"type": "text", "text": "Create hello.txt"}]}]
    cold = [{"role": "system", "content": COMPRESSION}, *history, {"role": "user", "content": COMPRESSION_ASK}]
    assert side_call_tags(cold, False, patterns) == ["summary"]
    shared = [*history, {"role": "user", "content": [{"type": "text", "text": COMPRESSION + "\n\nDo not call tools."}]}]
    assert side_call_tags(shared, True, patterns) == ["summary"]
    main_loop = load_first_request("qwen-code")["body"]["messages"]
    assert side_call_tags(main_loop, True, patterns) == []


def test_the_image_pins_the_adapters_version_on_node_22():
    assert create_harness("qwen-code", "docker").image == "harnessrl/qwen-code:latest"
    text = images.dockerfile("qwen-code").read_text()
    assert "ARG BASE=debian:bookworm-slim\nFROM ${BASE}" in text and "COPY extra-ca/" in text
    assert f"ARG QWEN_CODE_VERSION={VERSION}\n" in text and "ARG NODE_VERSION=22." in text


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


async def test_a_run_writes_its_settings_privately_and_its_answer_is_what_it_printed():
    sandbox = FakeSandbox(ExecResult(0, b"All done: wrote 42.\n", b"", False, 2.0))
    outcome = await create("qwen-code", "docker").run(sandbox, TASK, RolloutTarget("http://host/r/x/v1", TOKEN), 77.0)
    assert sandbox.files["/home/agent/.qwen/settings.json"][1] == 0o600
    command, timeout_s, env = sandbox.execs[1]
    assert command[0] == "qwen" and command[-1] == f"--prompt={TASK.instruction}" and timeout_s == 77.0
    assert env["OPENAI_BASE_URL"] == URL  # the URL as seen inside the sandbox
    assert (outcome.final_text, outcome.exit_code) == ("All done: wrote 42.", 0)

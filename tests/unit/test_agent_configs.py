"""The CLI agents' harnesses without the agents: configs, command lines, side-call rules, outcomes, images."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
import yaml

import docker
from gateway.request.tagging import side_call_tags
from harnesses import images
from harnesses.agents import AgentNotInstalled, AgentSettings, cli_agent, create
from harnesses.agents.cli_agent import Endpoint, HostInstall
from harnesses.harness import RolloutTarget
from harnesses.registry import create_harness
from harnesses.task import Task
from sandboxes import ExecResult, SandboxSpec

URL = "http://127.0.0.1:8123/r/hrl-secret/v1"
TOKEN = "hrl-secret"
ENDPOINT = Endpoint(URL, TOKEN, "policy", "/home/agent")
TASK = Task(name="t", instruction="Create hello.txt", files={"seed.txt": b"x"}, verifier="true")

# Side-call prompts as the agents send them (from their installed packages).
OPENCODE_TITLE = (
    "You are a title generator. You output ONLY a thread title. Nothing else.\n\n<task>\n"
    "Generate a brief title that would help the user find this conversation later."
)
OPENCODE_COMPACTION = "You are a context summarization agent. You are given a conversation between a user and an agent."
PI_SUMMARY = (
    "You are a context summarization assistant. Your task is to read a conversation between a user "
    "and an AI coding assistant, then produce a structured summary following the exact format specified."
)
HERMES_TITLE = (
    "Generate a short, descriptive title (3-7 words) for a conversation that starts with the "
    "following exchange. The title should capture the main topic or intent."
)
HERMES_COMPRESSION = "You are a summarization agent creating a context checkpoint. Treat the conversation turns"
MAIN_LOOP = {
    "opencode": "You are opencode, an interactive CLI tool that helps users with software engineering tasks.",
    "pi": "You are an expert coding assistant operating inside pi, a coding agent harness.",
    "hermes": "You are Hermes Agent, an intelligent AI assistant created by Nous Research.",
}
SIDE_PROMPTS = {
    "opencode": [("title", OPENCODE_TITLE), ("summary", OPENCODE_COMPACTION)],
    "pi": [("summary", PI_SUMMARY)],
    "hermes": [("title", HERMES_TITLE), ("summary", HERMES_COMPRESSION)],
}


# -- configs ----------------------------------------------------------------------------------------


def test_opencode_config_is_json_with_our_provider_at_the_gateway():
    harness = create("opencode")
    files = harness.config_files(ENDPOINT)
    path = "/home/agent/.config/opencode/opencode.json"
    config = json.loads(files[path])
    provider = config["provider"]["harnessrl"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": URL, "apiKey": TOKEN}
    assert provider["models"]["policy"]["limit"] == {"context": 131072, "output": 4096}
    assert config["model"] == config["small_model"] == "harnessrl/policy"
    assert "openai" not in config["provider"] and config["autoupdate"] is False
    assert set(config["permission"].values()) == {"allow"}
    env = harness.env(ENDPOINT)
    assert env["OPENCODE_CONFIG"] == path and env["HOME"] == "/home/agent"
    assert env["XDG_CONFIG_HOME"] == "/home/agent/.config"
    for name in ("AUTOUPDATE", "MODELS_FETCH", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
        assert env[f"OPENCODE_DISABLE_{name}"] == "1"


def test_pi_models_json_has_our_provider_at_the_gateway():
    harness = create("pi", settings=AgentSettings(max_tokens=512, context_length=8192))
    files = harness.config_files(ENDPOINT)
    provider = json.loads(files["/home/agent/.pi/agent/models.json"])["providers"]["harnessrl"]
    assert (provider["baseUrl"], provider["apiKey"], provider["api"]) == (URL, TOKEN, "openai-completions")
    assert provider["compat"] == {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
    assert provider["models"][0] | {"id": "policy", "maxTokens": 512, "contextWindow": 8192} == provider["models"][0]
    env = harness.env(ENDPOINT)
    assert env["PI_CODING_AGENT_DIR"] == "/home/agent/.pi/agent"
    assert (env["PI_OFFLINE"], env["PI_TELEMETRY"]) == ("1", "0")


def test_hermes_config_is_yaml_with_a_custom_provider_and_auxiliary_calls_at_the_gateway():
    harness = create("hermes")
    [(path, data)] = harness.config_files(ENDPOINT).items()
    assert path == "/home/agent/.hermes/config.yaml"
    config = yaml.safe_load(data)
    assert (
        config["model"]
        | {"provider": "custom", "default": "policy", "base_url": URL, "api_key": TOKEN, "max_tokens": 4096}
        == config["model"]
    )
    assert config["model"]["context_length"] >= 65536  # Hermes refuses less
    for task in ("title_generation", "compression"):
        assert (config["auxiliary"][task]["base_url"], config["auxiliary"][task]["api_key"]) == (URL, TOKEN)
    assert config["auxiliary"]["title_generation"]["enabled"] is True and config["compression"]["enabled"] is True
    assert harness.env(ENDPOINT)["HERMES_HOME"] == "/home/agent/.hermes"


def test_hermes_side_calls_can_be_switched_off():
    config = yaml.safe_load(
        create("hermes", settings=AgentSettings(side_calls=False)).config_files(ENDPOINT)[
            "/home/agent/.hermes/config.yaml"
        ]
    )
    assert config["auxiliary"]["title_generation"]["enabled"] is False
    assert config["compression"]["enabled"] is False


# -- command lines ----------------------------------------------------------------------------------


def test_command_lines_in_docker_use_the_image_path():
    assert create("opencode", "docker").command("do it", ENDPOINT) == [
        "opencode",
        "run",
        "-m",
        "harnessrl/policy",
        "--format",
        "json",
        "--",
        "do it",
    ]
    assert create("pi", "docker").command("do it", ENDPOINT) == [
        "pi",
        "--offline",
        "--provider",
        "harnessrl",
        "--model",
        "policy",
        "--no-session",
        "-p",
        "do it",
    ]
    assert create("hermes", "docker").command("do it", ENDPOINT) == ["hermes", "--oneshot=do it", "--yolo"]


def test_instructions_that_look_like_flags_stay_messages():
    assert create("pi", "docker").command("-v please", ENDPOINT)[-1] == "\n-v please"
    assert create("pi", "docker").command("@file", ENDPOINT)[-1] == "\n@file"
    assert create("hermes", "docker").command("--help me", ENDPOINT)[1] == "--oneshot=--help me"


def test_local_commands_run_the_host_install(monkeypatch):
    harness = create("pi")
    monkeypatch.setattr(harness, "host_install", lambda: HostInstall(("/opt/n/bin/node", "/opt/pi/cli.js"), ()))
    assert harness.command("x", ENDPOINT)[:3] == ["/opt/n/bin/node", "/opt/pi/cli.js", "--offline"]


# -- sandbox specs ----------------------------------------------------------------------------------


def test_docker_spec_names_the_harness_image_and_binds_nothing():
    base = SandboxSpec(gateway_url=URL, files={"base.txt": b"b"})
    spec = create("hermes", "docker").sandbox_spec(TASK, RolloutTarget(URL, TOKEN), base)
    assert spec.image == "harnessrl/hermes:latest" and spec.ro_binds == ()
    assert spec.files == {"base.txt": b"b", "seed.txt": b"x"} and spec.gateway_url == URL


def test_local_spec_shows_the_install_outside_the_system_dirs(monkeypatch):
    harness = create("hermes")
    install = HostInstall(("/opt/hermes/bin/hermes",), ("/opt/hermes", "/usr/lib/python3.11", "/root/.pyenv/v"))
    monkeypatch.setattr(harness, "host_install", lambda: install)
    spec = harness.sandbox_spec(TASK, RolloutTarget(URL, TOKEN), SandboxSpec(ro_binds=("/data",)))
    assert spec.ro_binds == ("/data", "/opt/hermes", "/root/.pyenv/v") and spec.image is None


@pytest.mark.parametrize(
    ("name", "hint"),
    [("opencode", "npm install -g opencode-ai@"), ("pi", "npm install -g @mariozechner/pi-coding-agent@")],
)
def test_a_missing_agent_names_the_install_command(monkeypatch, name, hint):
    monkeypatch.setattr(cli_agent.shutil, "which", lambda _: None)
    with pytest.raises(AgentNotInstalled, match=re.escape(hint)) as error:
        create(name).sandbox_spec(TASK, RolloutTarget(URL, TOKEN), SandboxSpec())
    assert "harnessrl images build" in str(error.value)


def test_registry_creates_the_cli_agents():
    assert create_harness("opencode").name == "opencode" and create_harness("hermes").kind.name == "local"
    with pytest.raises(ValueError, match="opencode, pi, hermes"):
        create("claude")


# -- side calls -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["opencode", "pi", "hermes"])
def test_side_call_patterns_tag_the_agents_side_prompts_and_not_its_main_loop(name):
    patterns = create(name).side_call_patterns
    for tag, prompt in SIDE_PROMPTS[name]:
        assert re.search(patterns[tag], prompt, re.IGNORECASE), (tag, prompt)
        messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "hi"}]
        assert tag in side_call_tags(messages, False, tuple(patterns.items()))
    main = [{"role": "system", "content": MAIN_LOOP[name]}, {"role": "user", "content": "write a title for my blog"}]
    assert not any(re.search(p, MAIN_LOOP[name], re.IGNORECASE) for p in patterns.values())
    assert side_call_tags(main, True, tuple(patterns.items())) == []


# -- outcomes ---------------------------------------------------------------------------------------

OPENCODE_STDOUT = (
    "\n".join(
        json.dumps(e)
        for e in [
            {"type": "step_start", "part": {"type": "step-start"}},
            {"type": "tool_use", "part": {"type": "tool", "tool": "write"}},
            {"type": "text", "part": {"type": "text", "text": "First."}},
            {"type": "text", "part": {"type": "text", "text": "Done.\n"}},
            {"type": "step_finish", "part": {"reason": "stop"}},
        ]
    )
    + "\nnot json\n{broken"
)
PI_STDOUT = "Done.\n"


def test_final_answers_are_parsed_from_each_agents_output():
    assert create("opencode").final_text(OPENCODE_STDOUT) == "Done."
    assert create("pi").final_text(PI_STDOUT) == create("hermes").final_text("\nDone.\n") == "Done."
    assert create("opencode").final_text("") == create("pi").final_text("") == ""


@dataclass
class FakeSandbox:
    """Records what the adapter writes and runs; answers $HOME, then the agent's canned result."""

    result: ExecResult
    workspace: str = "/workspace"
    gateway_url_inside: str | None = URL
    files: dict = field(default_factory=dict)
    execs: list = field(default_factory=list)

    async def put_file(self, path, data, mode=0o644):
        self.files[path] = (data, mode)

    async def exec(self, command, timeout_s=None, env=None, cwd=None):
        self.execs.append((command, timeout_s, env))
        if len(self.execs) == 1:
            return ExecResult(0, b"/home/agent", b"", False, 0.01)
        return self.result


async def test_run_writes_the_config_under_home_and_runs_the_agent_with_its_env():
    sandbox = FakeSandbox(ExecResult(0, PI_STDOUT.encode(), b"some log", False, 1.5))
    outcome = await create("pi", "docker").run(sandbox, TASK, RolloutTarget("http://host/r/x/v1", TOKEN), 99.0)
    data, mode = sandbox.files["/home/agent/.pi/agent/models.json"]
    assert json.loads(data)["providers"]["harnessrl"]["baseUrl"] == URL  # the inside URL, not the host's
    assert mode == 0o600
    command, timeout_s, env = sandbox.execs[1]
    assert command[0] == "pi" and command[-1] == TASK.instruction and timeout_s == 99.0
    assert env["HOME"] == "/home/agent" and env["PI_CODING_AGENT_DIR"] == "/home/agent/.pi/agent"
    assert (outcome.final_text, outcome.exit_code, outcome.timed_out) == ("Done.", 0, False)
    assert "some log" in outcome.log and "exit code 0" in outcome.log


async def test_a_timed_out_or_missing_agent_is_reported_in_the_outcome():
    killed = ExecResult(137, b"", b"", True, 5.0, "timeout")
    outcome = await create("hermes", "docker").run(FakeSandbox(killed), TASK, RolloutTarget(URL, TOKEN), 5.0)
    assert outcome.timed_out and outcome.exit_code == 137 and "killed (timeout)" in outcome.log
    missing = ExecResult(127, b"", b"sh: hermes: not found", False, 0.1)
    outcome = await create("hermes", "docker").run(FakeSandbox(missing), TASK, RolloutTarget(URL, TOKEN), 5.0)
    assert "pip install 'hermes-agent[mcp]==" in outcome.log


# -- images -----------------------------------------------------------------------------------------


class FakeImages:
    def __init__(self, have: set[str]):
        self.have, self.builds = have, []

    def get(self, name):
        if name not in self.have:
            raise docker.errors.ImageNotFound(name)

    def build(self, **kwargs):
        self.builds.append(kwargs)


class FakeClient:
    def __init__(self, have=("debian:bookworm-slim",)):
        self.images = FakeImages(set(have))


def test_images_build_each_harness_on_the_base_with_host_network():
    client = FakeClient(have={"my/base:1"})
    built = images.build_images(["pi", "hermes", "pi"], base="my/base:1", client=client)
    assert [b.tag for b in built] == ["harnessrl/pi:latest", "harnessrl/hermes:latest"]
    first = client.images.builds[0]
    assert (first["dockerfile"], first["buildargs"], first["tag"], first["network_mode"]) == (
        "Dockerfile.pi",
        {"BASE": "my/base:1"},
        "harnessrl/pi:latest",
        "host",
    )


def test_images_report_a_missing_base_or_engine_with_the_fix(monkeypatch):
    with pytest.raises(images.ImageBuildError, match="docker/setup-daemon.sh"):
        images.build_images(["opencode"], base="nope:1", client=FakeClient())
    with pytest.raises(images.ImageBuildError, match="no image for harness 'aider'"):
        images.build_images(["aider"], client=FakeClient())

    def no_engine(**kwargs):
        raise docker.errors.DockerException("Error while fetching server API version")

    monkeypatch.setattr(docker, "from_env", no_engine)
    with pytest.raises(images.ImageBuildError, match="no Docker daemon reachable.*docker/setup-daemon.sh"):
        images.build_images(["opencode"])


def test_build_context_holds_the_dockerfile_and_the_hosts_added_certificates(tmp_path):
    cas = tmp_path / "cas"
    (cas / "sub").mkdir(parents=True)
    (cas / "proxy.crt").write_text("A")
    (cas / "sub" / "other.crt").write_text("B")
    context = tmp_path / "context"
    context.mkdir()
    images._fill_context(context, images.dockerfile("opencode"), ca_dir=cas)
    assert (context / "Dockerfile.opencode").read_text().startswith("# The OpenCode harness image")
    assert sorted(p.read_text() for p in (context / "extra-ca").iterdir()) == ["A", "B"]
    for name in images.HARNESS_IMAGES:  # every Dockerfile takes BASE and copies extra-ca/
        text = images.dockerfile(name).read_text()
        assert "ARG BASE=debian:bookworm-slim\nFROM ${BASE}" in text and "COPY extra-ca/" in text
        assert "WORKDIR /workspace" in text and "python3" in text

"""What the three CLI agents (OpenCode, pi, Hermes) share: config in the sandbox, one exec, the outcome.

An agent runs inside its sandbox as its own process. Its harness:
1. finds the agent's HOME inside the sandbox (backends differ: /home/agent under bubblewrap, a private
   directory when unisolated, the image's user in docker) and writes the agent's config there,
   pointing at the rollout's gateway URL *as seen from inside* with the rollout token as API key;
2. runs the agent once, non-interactively, with the task instruction, under the task's timeout;
3. returns its final answer (parsed from the agent's machine-readable output) and a log tail.

Where the binary comes from depends on the sandbox kind the harness is made for: in docker, the
harness image (`harnessrl images build`) has it on PATH; in a local sandbox, the host's install is
shown read-only inside (only the parts bubblewrap does not already show: /usr is always there).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from harnesses.harness import AgentOutcome, RolloutTarget
from harnesses.task import Task
from sandboxes import ExecResult, Sandbox, SandboxSpec
from sandboxes.bwrap import SYSTEM_DIRS
from sandboxes.kinds import Kind, as_kind

PROVIDER_ID = "harnessrl"  # our own provider id: an agent's built-in "openai" provider has quirks
FALLBACK_HOME = "/tmp/harnessrl-agent"  # when the sandbox has no usable $HOME
LOG_CHARS = 8000


def image_tag(harness: str) -> str:
    """The docker image a CLI agent runs in (built by ``harnessrl images build``, harnesses/images.py)."""
    return f"harnessrl/{harness}:latest"


class AgentNotInstalled(RuntimeError):
    """The agent's binary is not on this host; the message names the install command."""


@dataclass(frozen=True)
class AgentSettings:
    max_tokens: int = 4096  # per model call; agents otherwise ask for 32K-64K, more than small engines allow
    # Advertised to the agent; the gateway still enforces the engine's real limit. Hermes refuses
    # anything under 64K, so the default sits above that.
    context_length: int = 131072
    side_calls: bool = True  # leave the agent's own title/summary calls on (they are recorded and tagged)


@dataclass(frozen=True)
class ShellTool:
    """An agent's tool that runs a shell command: its name and the argument holding the command."""

    name: str
    argument: str = "command"
    fixed: tuple[tuple[str, str], ...] = ()  # other arguments its schema requires, with fixed values

    def arguments(self, command: str) -> dict:
        return {self.argument: command, **dict(self.fixed)}


@dataclass(frozen=True)
class Endpoint:
    """Where the agent inside the sandbox sends its calls, and where its state lives."""

    base_url: str  # http://127.0.0.1:PORT/r/<token>/v1 (the path, and the token in it, kept)
    api_key: str  # the rollout token again: agents insist on a key
    model: str  # the public model name, "policy"
    home: str  # the agent's HOME inside the sandbox
    tools: bool = False  # give the agent the rollout's MCP tool server (at mcp_url)

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url.rstrip('/')}/tools/mcp"

    @property
    def xdg(self) -> dict[str, str]:
        return {
            "XDG_CONFIG_HOME": f"{self.home}/.config",
            "XDG_DATA_HOME": f"{self.home}/.local/share",
            "XDG_CACHE_HOME": f"{self.home}/.cache",
            "XDG_STATE_HOME": f"{self.home}/.local/state",
        }


@dataclass(frozen=True)
class HostInstall:
    """An agent installed on this host: the command to run and what a bubblewrap sandbox must show."""

    argv: tuple[str, ...]  # absolute paths: the agent's executable (after its interpreter, if any)
    paths: tuple[str, ...]  # host paths it needs (its package, its interpreter's install, ...)

    def ro_binds(self) -> tuple[str, ...]:
        return tuple(p for p in dict.fromkeys(self.paths) if not _under_system_dirs(p))


class CliAgentHarness:
    """Base of the CLI agents' harnesses; subclasses say how their agent is configured and run."""

    name: str
    executable: str  # the command's name on PATH (in the image and on the host)
    install_hint: str  # how to install it on the host
    # Tokens of its first prompt (system prompt, tools, a one-line task) with SmolLM2's tokenizer, from
    # tests/fixtures/first_requests: `run` warns when the engine's context is shorter.
    first_prompt_tokens: int = 0
    # Of those, the tokens it sends after the task (Claude Code: its environment and skills block). Samples
    # of different tasks share only the prompt before the task, so each sample carries these itself.
    tokens_after_task: int = 0
    side_call_patterns: dict[str, str] = {}
    shell_tool: ShellTool  # its tool that runs a shell command (demonstrations call it)

    def __init__(self, sandbox: Kind | str = "local", settings: AgentSettings | None = None):
        self.kind = as_kind(sandbox)  # a name (tests, `create(name, sandbox="docker")`) is read here
        self.settings = settings or AgentSettings()

    # -- what each agent defines ------------------------------------------------------------------

    def config_files(self, endpoint: Endpoint) -> dict[str, bytes]:
        """Absolute path inside the sandbox -> content."""
        raise NotImplementedError

    def agent_env(self, endpoint: Endpoint) -> dict[str, str]:
        raise NotImplementedError

    def arguments(self, instruction: str, endpoint: Endpoint) -> list[str]:
        """The command line after the executable."""
        raise NotImplementedError

    def final_text(self, stdout: str) -> str:
        raise NotImplementedError

    def host_install(self) -> HostInstall:
        """The host's install (local sandboxes); AgentNotInstalled with the fix when missing."""
        raise NotImplementedError

    # -- Harness ---------------------------------------------------------------------------

    @property
    def image(self) -> str:
        return image_tag(self.name)

    def sandbox_spec(self, task: Task, target: RolloutTarget, base: SandboxSpec) -> SandboxSpec:
        files = {**base.files, **task.files}
        if self.kind.runs_images or base.root is not None:  # the image (or its exported root) has the agent
            return replace(base, image=base.image or self.image, files=files)
        binds = self.host_install().ro_binds()
        return replace(base, files=files, ro_binds=tuple(dict.fromkeys((*base.ro_binds, *binds))))

    def command(self, instruction: str, endpoint: Endpoint, installed: bool = False) -> list[str]:
        """``installed``: the sandbox's image has the agent on PATH (an image's kind, or a task image's root)."""
        program = (self.executable,) if self.kind.runs_images or installed else self.host_install().argv
        return [*program, *self.arguments(instruction, endpoint)]

    def env(self, endpoint: Endpoint) -> dict[str, str]:
        common = {"HOME": endpoint.home, **endpoint.xdg, "NO_COLOR": "1", "TERM": "dumb", "CI": "1"}
        return {**common, **self.agent_env(endpoint)}

    async def run(self, sandbox: Sandbox, task: Task, target: RolloutTarget, timeout_s: float) -> AgentOutcome:
        endpoint = Endpoint(
            sandbox.gateway_url_inside or target.base_url,
            target.token,
            target.model,
            await sandbox_home(sandbox),
            tools=target.tools,
        )
        for path, data in self.config_files(endpoint).items():
            await sandbox.put_file(path, data, mode=0o600)  # holds the rollout token
        installed = getattr(getattr(sandbox, "spec", None), "root", None) is not None  # a task image's root
        result = await sandbox.exec(
            self.command(task.instruction, endpoint, installed), timeout_s=timeout_s, env=self.env(endpoint)
        )
        return self.outcome(result)

    def outcome(self, result: ExecResult) -> AgentOutcome:
        stdout = result.stdout.decode("utf-8", "replace")
        stderr = result.stderr.decode("utf-8", "replace")
        try:
            final = self.final_text(stdout)
        except (ValueError, KeyError, TypeError, AttributeError):  # a truncated or odd event stream
            final = ""
        return AgentOutcome(final, self.log(result, stdout, stderr), result.exit_code, result.timed_out)

    def log(self, result: ExecResult, stdout: str, stderr: str) -> str:
        status = f"killed ({result.killed_reason})" if result.killed_reason else f"exit code {result.exit_code}"
        head = f"[{self.name}: {status} after {result.duration_s:.1f} s]"
        if result.exit_code == 127:
            head += f"\n[{self.executable} not found in the sandbox: {self.install_hint}]"
        half = LOG_CHARS // 2
        return f"{head}\n--- stderr ---\n{stderr[-half:]}\n--- stdout ---\n{stdout[-half:]}"


async def sandbox_home(sandbox: Sandbox) -> str:
    """$HOME inside the sandbox, where the agent keeps its config and state."""
    result = await sandbox.exec(["/bin/sh", "-c", 'printf %s "$HOME"'], timeout_s=60)
    home = result.stdout.decode().strip()
    return home if result.exit_code == 0 and home not in ("", "/") else FALLBACK_HOME


def which(executable: str, hint: str) -> Path:
    """The executable's path on this host (symlinks kept), or AgentNotInstalled naming the fix."""
    found = shutil.which(executable)
    if found is None:
        raise AgentNotInstalled(
            f"{executable} not found: {hint}, or use the docker sandbox with `harnessrl images build`"
        )
    return Path(found)


def package_root(path: Path) -> Path:
    """The npm package a (symlinked) executable belongs to: the nearest folder with a package.json."""
    real = Path(os.path.realpath(path))
    for folder in real.parents:
        if (folder / "package.json").exists():
            return folder
    return real.parent


def install_prefix(path: Path) -> Path:
    """PREFIX of an executable installed as PREFIX/bin/NAME (symlinks resolved): /usr for /usr/bin/node."""
    return Path(os.path.realpath(path)).parent.parent


def _under_system_dirs(path: str) -> bool:
    """Whether bubblewrap sandboxes already show ``path`` (read-only system dirs of the host)."""
    real = os.path.realpath(path)
    return any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS)

"""Harbor task environments: each task's image built once, agents installed into it, roots exported.

A Harbor task's machine is its image (`TaskEnvironment`): ``environment/Dockerfile`` built with
``environment/`` as the context, tagged ``harnessrl-task/<name>:<hash of the context>`` (so an
unchanged task is never rebuilt, and a changed one is), or ``[environment] docker_image`` as is.
The build uses the host's network, as the harness images do; ``build_timeout_sec`` bounds it.
The image's WORKDIR is where the agent starts and the verifier runs; its ENV, with task.toml's
``[environment] env``, is every exec's environment.

A CLI agent runs inside the task's image: ``docker/Dockerfile.task-<agent>`` derives
``harnessrl-task/<name>-<agent>:<hash>`` from it, copying the agent's self-contained install out of
its harness image (a multi-stage build: no network, seconds), cached the same way. The route to the
gateway needs nothing in the image: in docker the forwarder runs in a sidecar container whose network
namespace the sandbox shares. The builtin agent, the oracle and the do-nothing agent run on the host
and act through execs, so they use the task image itself.

For local (bubblewrap) sandboxes the image's file system is exported once per image id into
``$XDG_CACHE_HOME/harnessrl/rootfs/<id>/`` and becomes the sandbox's read-only root, its WORKDIR
copied into the private workspace. The verifier runs in a fresh sandbox of the same kind, from the
task's own image with only the agent's work copied in (`Environments.grading_spec`,
harnesses/grading/grade.py). Without Docker a task with a Dockerfile cannot be built: the error says how to
get an engine.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from harnesses.agents.cli_agent import image_tag
from harnesses.base_images import unpullable_base
from harnesses.images import DOCKER_DIR
from harnesses.registry import cli_agents
from harnesses.task import Task, TaskEnvironment
from sandboxes import Limits, SandboxSpec
from sandboxes.kinds import Kind, as_kind

IMAGE_PREFIX = "harnessrl-task"
FORWARDER_IMAGE = "debian:bookworm-slim"  # python3 inside (docker/setup-daemon.sh builds it so)
PLAIN_IMAGE = FORWARDER_IMAGE  # a docker sandbox's image when neither the task nor the harness brings one
AGENTS_IN_TASK = cli_agents()  # docker/Dockerfile.task-<agent>: one per CLI agent
LOG_LINES = 30
DEFAULT_WORKDIR = "/workspace"  # for an image without WORKDIR (its "/" cannot be a private workspace)
DAEMON_HINT = (
    "a Harbor task with environment/Dockerfile needs a Docker daemon to build its image, also "
    "for --sandbox local (which runs the image's exported file system): run "
    "docker/setup-daemon.sh or set DOCKER_HOST"
)


class TaskEnvironmentError(RuntimeError):
    """A task's environment could not be made; the message names the task, the reason and the fix."""


@dataclass(frozen=True)
class ImageConfig:
    """A built image and what the sandbox takes from its config."""

    tag: str
    image_id: str  # sha256:...
    workdir: str  # the image's WORKDIR (DEFAULT_WORKDIR when it sets none)
    env: dict[str, str]  # the image's ENV


def rootfs_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("HARNESSRL_ROOTFS_CACHE") or Path(base) / "harnessrl" / "rootfs")


def context_hash(context: Path) -> str:
    """sha256 over the build context's files (relative paths, exec bits, bytes) and symlinks."""
    digest = hashlib.sha256()
    for item in sorted(context.rglob("*")):
        rel = item.relative_to(context).as_posix()
        if item.is_symlink():
            digest.update(f"L {rel} {os.readlink(item)}\n".encode())
        elif item.is_file():
            executable = os.access(item, os.X_OK)
            digest.update(f"F {rel} {int(executable)} {item.stat().st_size}\n".encode())
            digest.update(item.read_bytes())
    return digest.hexdigest()


def task_tag(task: Task, suffix: str = "") -> str:
    name = re.sub(r"[^a-z0-9_.-]+", "-", task.name.lower()).strip("-.") or "task"
    return f"{IMAGE_PREFIX}/{name[:100]}{suffix}"


class Environments:
    """Builds and caches task images, derived agent images and exported roots, for one process."""

    def __init__(self, client=None, allow_internet: bool = False, rootfs_dir: Path | None = None):
        self._client = client
        self.allow_internet = allow_internet
        self.rootfs_dir = rootfs_dir or rootfs_cache()
        self._locks: dict[str, asyncio.Lock] = {}
        self._done: dict[str, object] = {}

    # -- what the runner asks for ------------------------------------------------------------------

    def check(self, task: Task) -> None:
        """Refuse before any build what this run may not do (a task needing the internet)."""
        env = task.environment
        if env is not None and env.allow_internet and not self.allow_internet:
            raise TaskEnvironmentError(
                f"task {task.name}: task.toml says allow_internet = true; its sandbox would "
                "get the host's network: pass --allow-internet to allow it, or exclude the task"
            )

    async def sandbox_spec(self, task: Task, harness: str, backend: Kind | str, base: SandboxSpec) -> SandboxSpec:
        """``base`` with the task's image (docker) or exported root (local), WORKDIR, env and limits."""
        env = task.environment
        if env is None:
            return base
        self.check(task)
        image = await self.image_for(task, harness)
        images = as_kind(backend).runs_images
        image_env = image.env if images else {k: v for k, v in image.env.items() if k != "HOME"}
        # (a local root is read-only: $HOME stays the sandbox's own writable home)
        spec = replace(
            base,
            workdir=image.workdir,
            env={**image_env, **env.env, **base.env},
            limits=_limits(base.limits, env),
            internet=env.allow_internet,
        )
        if images:
            return replace(spec, image=image.tag, forwarder_image=FORWARDER_IMAGE)
        return replace(spec, image=None, root=str(await self.rootfs(image)))

    async def grading_spec(self, task: Task, backend: Kind | str, agent: SandboxSpec) -> SandboxSpec | None:
        """The fresh sandbox the task's verifier runs in (harnesses/grading/grade.py): the agent's sandbox
        `agent` as the task alone makes it (the task's own image or root, no agent install, no gateway,
        no files: the agent's work is copied in); None where the task grades in the agent's sandbox."""
        if task.grade_in == "agent_sandbox" or agent.workspace == "/":
            return None
        spec = replace(
            agent,
            gateway_url=None,
            gateway_port_inside=None,
            files={},
            ro_binds=(),
            forwarder_image=None,
            name=f"{agent.name or 'sbx'}-grade",
        )
        if task.environment is None:
            return spec
        image = await self.task_image(task)
        if as_kind(backend).runs_images:
            return replace(spec, image=image.tag)
        return replace(spec, root=str(await self.rootfs(image)))

    @staticmethod
    def with_plain_image(spec: SandboxSpec, backend: Kind | str) -> SandboxSpec:
        """A sandbox of an image's kind for a task without an image of its own (builtin tasks: files,
        instruction, verifier) played by a harness that brings none (builtin, oracle): the plain base image."""
        return replace(spec, image=PLAIN_IMAGE) if as_kind(backend).runs_images and not spec.image else spec

    async def image_for(self, task: Task, harness: str) -> ImageConfig:
        """The task's image, or for a CLI agent the image derived from it with the agent inside."""
        image = await self.task_image(task)
        if harness not in AGENTS_IN_TASK:
            return image
        return await self._once(f"agent:{image.image_id}:{harness}", lambda: self._derive(task, image, harness))

    async def task_image(self, task: Task) -> ImageConfig:
        env = task.environment
        if env is None:
            raise TaskEnvironmentError(f"task {task.name} has no environment of its own (environment/workspace/)")
        if env.docker_image:
            return await self._once(f"image:{env.docker_image}", lambda: self._existing(task, env.docker_image))
        tag = f"{task_tag(task)}:{context_hash(env.context)[:16]}"
        return await self._once(f"build:{tag}", lambda: self._build_task(task, env, tag))

    async def rootfs(self, image: ImageConfig) -> Path:
        return await self._once(f"rootfs:{image.image_id}", lambda: self._export(image))

    # -- the work, in threads ----------------------------------------------------------------------

    async def _once(self, key: str, make):
        """Each image or root made at most once per process, however many rollouts ask at once."""
        if key in self._done:
            return self._done[key]
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._done:
                self._done[key] = await asyncio.to_thread(make)
            return self._done[key]

    def client(self):
        if self._client is None:
            self._client = docker_client()
        return self._client

    def _existing(self, task: Task, name: str) -> ImageConfig:
        import docker

        try:
            return _config(name, self.client().images.get(name))
        except docker.errors.ImageNotFound:
            pass
        try:
            return _config(name, self.client().images.pull(name))
        except docker.errors.APIError as exc:
            raise TaskEnvironmentError(
                f"task {task.name}: image {name!r} (task.toml docker_image) is not here and "
                f"could not be pulled ({exc.explanation or exc}): load it with `docker load` "
                "or build it, then run again"
            ) from None

    def _build_task(self, task: Task, env: TaskEnvironment, tag: str) -> ImageConfig:
        found = _cached(self.client(), tag)
        if found is not None:
            return found
        build(self.client(), str(env.context), tag, {}, env.build_timeout_s, f"task {task.name}")
        return _config(tag, self.client().images.get(tag))

    def _derive(self, task: Task, image: ImageConfig, harness: str) -> ImageConfig:
        agent = image_tag(harness)
        agent_id = self._agent_image_id(task, agent, harness)
        dockerfile = DOCKER_DIR / f"Dockerfile.task-{harness}"
        recipe = hashlib.sha256(f"{image.image_id} {agent_id} ".encode() + dockerfile.read_bytes()).hexdigest()
        tag = f"{task_tag(task, '-' + harness)}:{recipe[:16]}"
        found = _cached(self.client(), tag)
        if found is None:
            with tempfile.TemporaryDirectory(prefix=f"harnessrl-derive-{harness}-") as context:
                shutil.copy(dockerfile, Path(context) / "Dockerfile")
                build(
                    self.client(),
                    context,
                    tag,
                    {"TASK_IMAGE": image.image_id, "AGENT_IMAGE": agent},
                    task.environment.build_timeout_s,
                    f"task {task.name} with {harness}",
                )
        # The task's WORKDIR and ENV stay the task's: the derived image only adds the agent.
        return replace(_config(tag, self.client().images.get(tag)), workdir=image.workdir, env=image.env)

    def _agent_image_id(self, task: Task, agent: str, harness: str) -> str:
        import docker

        try:
            return self.client().images.get(agent).id
        except docker.errors.ImageNotFound:
            raise TaskEnvironmentError(
                f"task {task.name}: {harness} is installed into task images from {agent}, "
                f"which is missing: harnessrl images build --harness {harness}"
            ) from None

    def _export(self, image: ImageConfig) -> Path:
        """The image's file system under the cache, once per image id (a finished export is kept)."""
        target = self.rootfs_dir / image.image_id.removeprefix("sha256:")[:32]
        if (target / ".harnessrl-complete").exists():
            return target
        self.rootfs_dir.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=self.rootfs_dir))
        container = self.client().containers.create(image.tag, command=["/bin/sh"], network_mode="none")
        try:
            with subprocess.Popen(
                ["tar", "-C", str(partial), "-xf", "-", "--no-same-owner", "--exclude=dev/*"],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
            ) as tar:
                for chunk in container.export():
                    tar.stdin.write(chunk)
                tar.stdin.close()
                error = tar.stderr.read().decode(errors="replace")
            if tar.returncode != 0:
                raise TaskEnvironmentError(f"exporting {image.tag} failed: {error[-1000:]}")
        finally:
            container.remove(force=True)
        (partial / ".harnessrl-complete").write_text(image.tag + "\n")
        try:
            partial.rename(target)
        except OSError:  # another process finished the same export first
            shutil.rmtree(partial, ignore_errors=True)
        return target


def docker_client():
    """A client of the local engine, or TaskEnvironmentError naming the fix."""
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine here
        raise TaskEnvironmentError(f"no Docker daemon reachable ({type(exc).__name__}): {DAEMON_HINT}") from None
    return client


def build(client, context: str, tag: str, buildargs: dict, timeout_s: float, what: str) -> None:
    """``docker build`` on the host's network; TaskEnvironmentError with the log's tail on failure or timeout."""
    deadline, lines = time.monotonic() + timeout_s, []
    try:
        stream = client.api.build(
            path=context,
            tag=tag,
            buildargs=buildargs,
            network_mode="host",
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            timeout=max(1.0, timeout_s),
        )
        for chunk in stream:
            text = str(chunk.get("stream") or chunk.get("error") or "").rstrip()
            if text:
                lines.append(text)
            if chunk.get("error"):
                raise TaskEnvironmentError(f"{what}: {_build_error(chunk['error'], context)}\n" + _tail(lines))
            if time.monotonic() > deadline:
                stream.close()  # the engine cancels a build whose client went away
                raise TaskEnvironmentError(
                    f"{what}: build timed out after {timeout_s:.0f} s (build_timeout_sec)\n" + _tail(lines)
                )
    except TaskEnvironmentError:
        raise
    except Exception as exc:  # noqa: BLE001 - the engine's or the transport's error, reported with its log
        kind = "timed out" if "timed out" in str(exc).lower() else "failed"
        raise TaskEnvironmentError(f"{what}: build {kind} ({type(exc).__name__}: {exc})\n" + _tail(lines)) from None


def _build_error(error: str, context: str) -> str:
    """The build's error: a base image that could not be pulled named with the remedy (base_images.py)."""
    dockerfile = Path(context) / "Dockerfile"
    text = dockerfile.read_text(errors="replace") if dockerfile.is_file() else ""
    return unpullable_base(error, text) or f"build error: {error.strip()}"


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-LOG_LINES:])


def _cached(client, tag: str) -> ImageConfig | None:
    import docker

    try:
        return _config(tag, client.images.get(tag))
    except docker.errors.ImageNotFound:
        return None


def _config(tag: str, image) -> ImageConfig:
    config = image.attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return ImageConfig(tag, image.id, config.get("WorkingDir") or DEFAULT_WORKDIR, env)


def _limits(limits: Limits, env: TaskEnvironment) -> Limits:
    """The task's cpus and memory_mb over the run's defaults."""
    return replace(
        limits,
        cpus=env.cpus or limits.cpus,
        memory_bytes=env.memory_mb * 2**20 if env.memory_mb else limits.memory_bytes,
    )

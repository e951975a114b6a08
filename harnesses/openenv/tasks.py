"""OpenEnv environments as tasks: ``--tasks openenv:SPEC``.

``SPEC`` names an OpenEnv environment three ways:

- ``http://HOST:PORT`` (or https): a running environment server, reached as it is;
- ``MODULE:CLASS``: an installed environment package's ``Environment`` class, served per rollout by
  ``python -m harnesses.openenv.serve`` (OpenEnv's own ``create_app``) on a free 127.0.0.1 port;
- anything else: a Docker image of an environment server (OpenEnv's images listen on 8000), run
  per rollout with only 127.0.0.1 publishing its port.

The tasks are the environment's own, read through OpenEnv's Task API (``/list_environments``,
``/{env}/splits``, ``/{env}/tasks``): each (environment, split, index) becomes a harnessrl task named
``{env}-{split}-{id or index}`` whose instruction is the task's ``instruction`` / ``prompt`` /
``question`` (its JSON otherwise). The task remembers where it came from in ``Task.source``
(``openenv:SPEC#ENV/SPLIT/INDEX``); ``harnesses.openenv.agent`` starts or reaches the environment for
each rollout, resets it to that task, gives the agent its MCP tools, and reads its reward at the end.
The reward is the ``environment`` component (``environment_reward``); such a task has no tests of its
own, so its verifier scores 0.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx

from harnesses.harness import AgentOutcome
from harnesses.task import Task, TaskError

PREFIX = "openenv:"
START_TIMEOUT_S = 180.0  # an environment server's start-up (imports) on a small machine
NO_TESTS_VERIFIER = "exit 1"  # the task has no tests: the verifier scores 0, the environment scores the rollout
REWARD_NAME = "harnesses.openenv.tasks:environment_reward"
IMAGE_PORT = 8000  # where OpenEnv's environment images serve
RESULT_CHARS = 4000  # of a tool's result fed back to the model
RUN_IT_YOURSELF = (
    "start the environment yourself (docker run --network host IMAGE, or python -m "
    "harnesses.openenv.serve MODULE:CLASS --port PORT) and pass openenv:http://127.0.0.1:PORT"
)


@dataclass(frozen=True)
class EnvTaskRef:
    """One task of an OpenEnv environment: where the environment is, and which task to reset it to."""

    spec: str
    env: str
    split: str
    index: int

    @property
    def source(self) -> str:
        return f"{PREFIX}{self.spec}#{self.env}/{self.split}/{self.index}"

    @classmethod
    def of(cls, task: Task) -> EnvTaskRef | None:
        """The reference of an OpenEnv task; None for any other task."""
        if not task.source.startswith(PREFIX) or "#" not in task.source:
            return None
        spec, _, where = task.source.removeprefix(PREFIX).rpartition("#")
        env, split, index = where.split("/")
        return cls(spec, env, split, int(index))


@dataclass(frozen=True)
class EnvOutcome(AgentOutcome):
    """An agent's outcome on an OpenEnv task, with what the environment said at the end."""

    env_reward: float | None = None  # the last observation's reward; None: the environment gave none
    env_done: bool = False  # whether the environment ended the episode
    tool_calls: int = 0  # tool calls the environment served


def environment_reward(outcome: AgentOutcome | None = None) -> float | None:
    """The reward function of OpenEnv tasks: the environment's own reward (None: it gave none)."""
    return outcome.env_reward if isinstance(outcome, EnvOutcome) else None


def tool_text(observation) -> str:
    """What a tool call returned, as text for the model (its error when it failed)."""
    if getattr(observation, "error", None):
        return f"error: {observation.error.message}"[:RESULT_CHARS]
    result = getattr(observation, "result", None)
    if isinstance(result, dict):
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        return ("\n".join(texts) if any(texts) else json.dumps(result.get("data")))[:RESULT_CHARS]
    return str(result)[:RESULT_CHARS]


def is_openenv_tasks(source: str) -> bool:
    return source.startswith(PREFIX)


def spec_kind(spec: str) -> str:
    if re.match(r"https?://", spec):
        return "url"
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):
        return "package"
    return "image"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EnvServer:
    """The environment server for one rollout (or one task listing): reached, or started and stopped."""

    def __init__(self, spec: str, start_timeout_s: float = START_TIMEOUT_S):
        self.spec, self.kind, self.start_timeout_s = spec, spec_kind(spec), start_timeout_s
        self.url, self._process, self._container, self._log = spec.rstrip("/"), None, None, None

    def start(self) -> str:
        if self.kind == "package":
            port = free_port()
            self.url = f"http://127.0.0.1:{port}"
            self._log = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server never blocks on it
            self._process = subprocess.Popen(
                [sys.executable, "-m", "harnesses.openenv.serve", self.spec, "--port", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=self._log,
            )
        elif self.kind == "image":
            self._start_container()
        self._wait_healthy()
        return self.url

    def _start_container(self) -> None:
        import docker

        try:
            client = docker.from_env()
            client.images.get(self.spec)  # never a pull: registries are not reachable from every machine
            container = client.containers.run(
                self.spec, detach=True, auto_remove=True, ports={f"{IMAGE_PORT}/tcp": ("127.0.0.1", None)}
            )
        except docker.errors.ImageNotFound:
            raise TaskError(
                f"openenv:{self.spec}: no such image on this Docker daemon; build the environment's "
                f"image (docker build -t {self.spec} ENV_DIR/server) or {RUN_IT_YOURSELF}"
            ) from None
        except docker.errors.DockerException as exc:
            raise TaskError(f"openenv:{self.spec}: cannot run the environment image: {exc}") from None
        self._container = container
        with contextlib.suppress(docker.errors.DockerException):
            container.reload()
        published = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        if not published.get(f"{IMAGE_PORT}/tcp"):
            self.stop()
            raise TaskError(
                f"openenv:{self.spec}: the Docker daemon published no port for the environment's "
                f"{IMAGE_PORT} (it has no bridge network, e.g. dockerd --bridge=none, or the container "
                f"exited at once); {RUN_IT_YOURSELF}"
            )
        self.url = f"http://127.0.0.1:{published[f'{IMAGE_PORT}/tcp'][0]['HostPort']}"

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                self._log.seek(0)
                error = self._log.read().decode(errors="replace")[-2000:]
                raise TaskError(
                    f"openenv:{self.spec}: the environment server exited ({self._process.returncode}):\n{error}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=5.0).status_code == 200:
                    return
            if self.kind == "url":
                break
            time.sleep(0.5)
        self.stop()
        raise TaskError(
            f"openenv:{self.spec}: no OpenEnv environment answers at {self.url}/health"
            + ("" if self.kind == "url" else f" after {self.start_timeout_s:.0f} s")
        )

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.stop(timeout=5)
            self._container = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def load_openenv_tasks(source: str) -> list[Task]:
    """Every task of every split of the environment ``openenv:SPEC`` names."""
    spec = source.removeprefix(PREFIX)
    if not spec:
        raise TaskError("--tasks openenv: names no environment: use openenv:URL, openenv:MODULE:CLASS or openenv:IMAGE")
    with EnvServer(spec) as url, httpx.Client(base_url=url, timeout=60.0) as http:
        tasks = []
        for env in _get(http, "/list_environments"):
            for split in _get(http, f"/{env}/splits"):
                name = split["name"] if isinstance(split, dict) else str(split)
                listed = _post(http, f"/{env}/tasks", {"split": name})["tasks"]
                tasks += [env_task(EnvTaskRef(spec, env, name, i), item) for i, item in enumerate(listed)]
    if not tasks:
        raise TaskError(
            f"--tasks {source}: the environment lists no tasks (its Task API: /{{env}}/splits, /{{env}}/tasks)"
        )
    return tasks


def env_task(ref: EnvTaskRef, item) -> Task:
    """A harnessrl task for one listed task of the environment."""
    fields = item if isinstance(item, dict) else {"instruction": str(item)}
    label = str(fields.get("id", ref.index))
    instruction = next(
        (str(fields[k]) for k in ("instruction", "prompt", "question") if fields.get(k)), json.dumps(fields)
    )
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{ref.env}-{ref.split}-{label}").strip("-")
    return Task(
        name=name, instruction=instruction, verifier=NO_TESTS_VERIFIER, reward_source="exit_code", source=ref.source
    )


def _get(http: httpx.Client, path: str):
    return _checked(http.get(path), path)


def _post(http: httpx.Client, path: str, body: dict):
    return _checked(http.post(path, json=body), path)


def _checked(response: httpx.Response, path: str):
    if response.status_code == 501:
        raise TaskError(
            f"the OpenEnv environment does not offer the Task API ({path}: 501), so it has no tasks to list"
        )
    if response.status_code != 200:
        raise TaskError(f"the OpenEnv environment answered {path} with {response.status_code}: {response.text[:300]}")
    return response.json()

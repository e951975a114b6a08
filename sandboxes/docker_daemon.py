"""The docker daemon as the sandboxes reach it: one process-wide client, checked once, and a thread pool
of its own for the SDK's blocking calls (an exec holds a thread for as long as its command runs, and
asyncio's default pool, a few threads, would cap concurrent rollouts)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import tarfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker.errors

import docker
from sandboxes.protocol import SandboxError

_pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="harnessrl-docker")
_client: docker.DockerClient | None = None


def default_client() -> docker.DockerClient:
    """A process-wide client (DOCKER_HOST or the local socket), checked once."""
    global _client
    if _client is None:
        try:
            client = docker.from_env(max_pool_size=256, timeout=600)
            client.ping()
        except docker.errors.DockerException as exc:
            raise SandboxError(
                f"docker daemon not reachable: run docker/setup-daemon.sh or set DOCKER_HOST ({exc})"
            ) from exc
        _client = client
    return _client


async def call(fn, *args, **kwargs):
    return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


async def created(orphans: list[str], create: Callable[..., str], *args) -> str:
    """The id of the container ``create`` makes. Cancelled meanwhile (Ctrl-C, SIGTERM), the engine makes it
    all the same: its id goes to ``orphans``, for the caller to remove, before the cancel goes on."""
    creating = asyncio.ensure_future(call(create, *args))
    try:
        return await asyncio.shield(creating)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # not made after all: nothing to remove
            orphans.append(await creating)
        raise


def tar_of(files: Mapping[str, bytes], mode: int = 0o644) -> bytes:
    """A tar archive of path -> content; the engine creates missing parent directories."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def save_archive(api, container_id: str, path: str, into: Path) -> bool:
    """The tar of a container's path (named by its base name) into a host file; False when path is gone."""
    try:
        stream, _ = api.get_archive(container_id, path)
        with into.open("wb") as file:
            for chunk in stream:
                file.write(chunk)
    except docker.errors.NotFound:
        return False
    return True


class OomKills:
    """Whether the kernel OOM-killed something in a container, read from the engine's ``oom`` events
    and ``State.OOMKilled``."""

    TRIES = 5  # for a SIGKILLed exec: the event arrives on another path than the exec's exit

    def __init__(self, api, container_id: str):
        self.api, self.container_id = api, container_id
        self.created = time.time()
        self.seen = 0  # oom events counted so far

    async def since_last(self, wait: bool) -> bool:
        """Whether one happened since the last look (``wait``: give its event a moment to arrive)."""
        for _ in range(self.TRIES if wait else 1):
            state = (await call(self.api.inspect_container, self.container_id))["State"]
            events = await call(self._events)
            fresh, self.seen = events > self.seen, events
            if fresh or state.get("OOMKilled"):
                return True
            await asyncio.sleep(0.1)
        return False

    def _events(self) -> int:
        # `until` in the future would hold the stream open until then: now, to the nanosecond.
        stream = self.api.events(
            since=int(self.created) - 1,
            until=f"{time.time():.9f}",
            decode=True,
            filters={"container": self.container_id, "event": "oom"},
        )
        return sum(1 for _ in stream)

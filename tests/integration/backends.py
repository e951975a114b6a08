"""The two isolated sandbox backends of the integration tests: a docker container and bubblewrap (and
Harbor's podman environments, for tests that hold for every backend).

CI starts the engine and builds the base image with docker/setup-daemon.sh before the tests; elsewhere
the docker half skips, saying so (and the bubblewrap half without bubblewrap).
"""

from __future__ import annotations

import shutil

import pytest

from sandboxes import SandboxError, SandboxSpec, create_sandbox
from sandboxes.harbor_process import harbor_python

BASE_IMAGE = "debian:bookworm-slim"


def _docker_skip_reason() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        return f"docker daemon not running ({type(exc).__name__}): run docker/setup-daemon.sh"
    try:
        client.images.get(BASE_IMAGE)
    except Exception:  # noqa: BLE001
        return f"image {BASE_IMAGE} missing: run docker/setup-daemon.sh"
    return None


DOCKER_SKIP = _docker_skip_reason()
BACKENDS = [
    pytest.param("docker", marks=pytest.mark.skipif(DOCKER_SKIP is not None, reason=DOCKER_SKIP or "")),
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(
            shutil.which("bwrap") is None, reason="bubblewrap not installed: apt-get install -y bubblewrap"
        ),
    ),
]


def _harbor_skip_reason() -> str | None:
    try:
        harbor_python()
    except SandboxError as exc:
        return str(exc)
    return None if shutil.which("podman") else "podman not installed: run tests/setup_machine.sh"


# Harbor's podman environments, for tests that hold for every backend (podman copies docker's image).
HARBOR_SKIP = DOCKER_SKIP or _harbor_skip_reason()
HARBOR_PODMAN = pytest.param(
    "harbor:podman", marks=pytest.mark.skipif(HARBOR_SKIP is not None, reason=HARBOR_SKIP or "")
)


def backend_spec(backend: str, **fields) -> SandboxSpec:
    runs_images = backend == "docker" or backend.startswith("harbor:")
    return SandboxSpec(image=BASE_IMAGE if runs_images else None, **fields)


async def create_backend(backend: str, spec: SandboxSpec):
    if backend == "docker":
        return await create_sandbox("docker", spec)
    return await create_sandbox("local", spec, isolation="bwrap")

"""Harness images for docker sandboxes: `docker/Dockerfile.<harness>` built as `harnessrl/<harness>:latest`.

Each Dockerfile starts `FROM ${BASE}` (default debian:bookworm-slim). Machines without a registry
build that base offline with docker/setup-daemon.sh, which also starts the engine. Builds use the
host's network (`network_mode="host"`): package registries are reachable, bridge networks are not
created.

The build context is a temporary folder with the Dockerfile and `extra-ca/`: the certificates this
host added to its trust store (/usr/local/share/ca-certificates, Debian's place for them). Behind a
TLS-intercepting proxy, npm and pip in the build need them; elsewhere the folder is empty.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harnesses.agents.cli_agent import image_tag
from harnesses.registry import cli_agents

DEFAULT_BASE = "debian:bookworm-slim"
HARNESS_IMAGES = cli_agents()  # docker/Dockerfile.<name>: one per CLI agent
DOCKER_DIR = Path(__file__).resolve().parent.parent / "docker"
SETUP_HINT = "docker/setup-daemon.sh starts an engine and builds the base image offline"
LOG_LINES = 30  # of a failed build, in the error
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the fix."""


@dataclass(frozen=True)
class BuiltImage:
    harness: str
    tag: str
    seconds: float


def dockerfile(harness: str, context: Path = DOCKER_DIR) -> Path:
    if harness not in HARNESS_IMAGES:
        raise ImageBuildError(f"no image for harness {harness!r}; choose from {', '.join(HARNESS_IMAGES)}")
    path = context / f"Dockerfile.{harness}"
    if not path.exists():
        raise ImageBuildError(f"{path} is missing: build from a harnessrl checkout (its docker/ folder)")
    return path


def docker_client():
    """A client of the local engine (or DOCKER_HOST), or ImageBuildError saying how to start one."""
    import docker  # the SDK only when images are built

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageBuildError(
            f"no Docker daemon reachable ({type(exc).__name__}: {exc}); run docker/setup-daemon.sh or set DOCKER_HOST"
        ) from None
    return client


def build_images(
    harnesses: Iterable[str] = HARNESS_IMAGES,
    base: str = DEFAULT_BASE,
    client=None,
    context: Path = DOCKER_DIR,
    on_start: Callable[[str, str], None] = lambda harness, tag: None,
) -> list[BuiltImage]:
    """Build each harness's image on ``base``, in order; stops at the first failure."""
    names = list(dict.fromkeys(harnesses))
    files = {name: dockerfile(name, context) for name in names}  # unknown names fail before any build
    client = client or docker_client()
    _check_base(client, base)
    built = []
    for name in names:
        on_start(name, image_tag(name))
        built.append(_build(client, name, files[name], base))
    return built


def _check_base(client, base: str) -> None:
    import docker

    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        raise ImageBuildError(
            f"base image {base!r} not found; {SETUP_HINT} (as debian:bookworm-slim, or "
            f"HARNESSRL_BASE_IMAGE={base} docker/setup-daemon.sh), or pass --base IMAGE"
        ) from None


def _build(client, harness: str, path: Path, base: str) -> BuiltImage:
    import docker

    tag, started = image_tag(harness), time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix=f"harnessrl-image-{harness}-") as context:
            _fill_context(Path(context), path)
            client.images.build(
                path=context,
                dockerfile=path.name,
                buildargs={"BASE": base},
                tag=tag,
                network_mode="host",
                rm=True,
                forcerm=True,
                pull=False,
            )
    except docker.errors.BuildError as exc:
        lines = [str(chunk.get("stream") or chunk.get("error") or "").rstrip() for chunk in exc.build_log]
        tail = "\n".join(line for line in lines if line)[-4000:].splitlines()[-LOG_LINES:]
        raise ImageBuildError(f"building {tag} from {path} failed: {exc.msg}\n" + "\n".join(tail)) from None
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"building {tag} from {path} failed: {exc}") from None
    return BuiltImage(harness, tag, time.monotonic() - started)


def _fill_context(context: Path, path: Path, ca_dir: Path = HOST_CA_DIR) -> None:
    """The Dockerfile and extra-ca/ (the host's added CA certificates, maybe none)."""
    shutil.copy(path, context / path.name)
    extra = context / "extra-ca"
    extra.mkdir()
    for number, cert in enumerate(sorted(ca_dir.rglob("*.crt")) if ca_dir.is_dir() else []):
        shutil.copy(cert, extra / f"{number:03d}-{cert.name}")

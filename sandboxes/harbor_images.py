"""Images for Harbor's environments: built by this host's Docker, put where the environment pulls from.

Task and harness images are built with Docker (``harnessrl images build``, harnesses/environments.py).
Harbor's ``podman`` type runs images from podman's store, so an image is copied there once per image
id (``docker save | podman load``, about 20 s for a 900 MB harness image) and named as Docker names it.
A cloud type pulls each image by name from a registry: with ``--sandbox-option image_registry=REGISTRY``
(harnessrl's own option, not passed to Harbor) each image is tagged ``REGISTRY/NAME`` and pushed there
once per image id and process, and the environment asks for that name (docs/running.md).
"""

from __future__ import annotations

import asyncio
import shutil

from sandboxes.protocol import SandboxError

REGISTRY_OPTION = "image_registry"  # --sandbox-option image_registry=REGISTRY: images pushed there first
_locks: dict[str, asyncio.Lock] = {}


async def _output(*argv: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return process.returncode, out.decode("utf-8", "replace").strip()


async def image_id(engine: str, image: str) -> str | None:
    """The id ``engine`` ("docker" | "podman") has for ``image``, or None when it has none."""
    code, out = await _output(engine, "image", "inspect", "--format", "{{.Id}}", image)
    return out.removeprefix("sha256:") if code == 0 else None


async def in_podman(image: str) -> str:
    """``image`` in podman's store as Docker has it now (loaded once per id); its name for podman."""
    for tool in ("docker", "podman"):
        if shutil.which(tool) is None:
            raise SandboxError(f"--sandbox harbor:podman needs `{tool}` on PATH: run `sudo tests/setup_machine.sh`")
    async with _locks.setdefault(image, asyncio.Lock()):
        wanted = await image_id("docker", image)
        if wanted is None:
            if await image_id("podman", image) is not None:
                return image  # podman's own (pulled or built there)
            raise SandboxError(
                f"image {image!r} is neither in Docker nor in podman: build it (`harnessrl images build`)"
            )
        if await image_id("podman", image) == wanted:
            return image
        code, out = await _output("bash", "-o", "pipefail", "-c", 'docker save "$1" | podman load', "load", image)
        if code != 0:
            raise SandboxError(f"copying image {image!r} from Docker to podman failed: {out[-500:]}")
        return image


_pushed: dict[str, str] = {}  # REGISTRY/NAME -> the image id pushed under it by this process


async def in_registry(image: str, registry: str) -> str:
    """``image`` pushed to ``registry`` as ``REGISTRY/NAME`` (once per image id in this process); that name.
    The registry's credentials are Docker's own (`docker login REGISTRY`)."""
    remote = f"{registry.rstrip('/')}/{image}"
    async with _locks.setdefault(remote, asyncio.Lock()):
        wanted = await image_id("docker", image)
        if wanted is None:
            raise SandboxError(f"image {image!r} is not in Docker: build it (`harnessrl images build`) to push it")
        if _pushed.get(remote) == wanted:
            return remote
        for argv in (("docker", "tag", image, remote), ("docker", "push", remote)):
            code, out = await _output(*argv)
            if code != 0:
                raise SandboxError(f"`{' '.join(argv)}` failed (`docker login {registry}` first?): {out[-500:]}")
        _pushed[remote] = wanted
        return remote

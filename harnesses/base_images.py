"""A Dockerfile's base image that cannot be pulled, said plainly.

Machines without a registry (this project's CI, air-gapped clusters) fail a task's build at its FROM
with the engine's raw words ("lookup registry-1.docker.io ... no such host"). The build's error names
which image is missing, that no registry is reachable, and how to provide the image; a digest-pinned
FROM needs that exact image, which a local build under the same name does not give.
"""

from __future__ import annotations

import re

# The engine's words for a base image it could not fetch (Docker 24-28, BuildKit and the classic builder).
PULL_FAILURES = (
    "pull access denied",
    "no such host",
    "failed to resolve source metadata",
    "manifest unknown",
    "repository does not exist",
    "dial tcp",
    "i/o timeout",
    "TLS handshake timeout",
    "failed to do request",
)
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE | re.MULTILINE)


def base_images(dockerfile: str) -> list[str]:
    """The images the Dockerfile's FROM lines name, earlier stages of its own left out, in order."""
    stages, images = set(), []
    for image, alias in _FROM.findall(dockerfile):
        if image.lower() not in stages and image not in images:
            images.append(image)
        if alias:
            stages.add(alias.lower())
    return images


def unpullable_base(error: str, dockerfile: str) -> str | None:
    """What to tell the user when ``error`` (a build's) is a base image that could not be pulled; None
    when it is another error."""
    if not any(words in error for words in PULL_FAILURES):
        return None
    images = base_images(dockerfile)
    named = [image for image in images if image.split("@")[0].split(":")[0] in error] or images
    if not named:
        return None
    listed = ", ".join(repr(image) for image in named)
    message = (
        f"the base image {listed} (the Dockerfile's FROM) is not on this machine and could not be pulled: "
        f"no registry is reachable from here ({error.strip().splitlines()[0][:200]}). Provide it: "
        f"`docker load -i IMAGE.tar` (saved with `docker save` on a machine that can pull it), build it here "
        f"under that name, or point the Docker daemon at a registry mirror"
    )
    if any("@sha256:" in image for image in named):
        message += (
            "; a digest-pinned FROM needs that exact image: an image built here under the name has another digest"
        )
    return message

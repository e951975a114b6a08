"""Sandboxes for agents: the `Sandbox` protocol and its backends.

    async with await create_sandbox("local", SandboxSpec(gateway_url=url, limits=Limits(memory_bytes=2**30))) as sb:
        result = await sb.exec("curl -s $HARNESSRL_GATEWAY_URL/models", timeout_s=30)

Backends: "docker" (docker SDK; `--network none` plus the gateway socket) and "local" (bubblewrap when
installed, else an unisolated subprocess). This package imports nothing else of harnessrl.
"""

from __future__ import annotations

from typing import Literal

from sandboxes.protocol import WORKSPACE, ExecResult, KilledReason, Limits, Sandbox, SandboxError, SandboxSpec

SandboxKind = Literal["docker", "local"]

__all__ = [
    "WORKSPACE",
    "ExecResult",
    "KilledReason",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxKind",
    "SandboxSpec",
    "create_sandbox",
]


async def create_sandbox(kind: SandboxKind, spec: SandboxSpec, **options) -> Sandbox:
    """Create and start a sandbox. Options go to the backend: `isolation` for local
    ("auto" | "bwrap" | "subprocess"), `client` (a docker.DockerClient) for docker."""
    if kind == "local":
        from sandboxes.local import LocalSandbox

        return await LocalSandbox.create(spec, **options)
    if kind == "docker":
        from sandboxes.docker import DockerSandbox  # the docker SDK only when asked for

        return await DockerSandbox.create(spec, **options)
    raise SandboxError(f"unknown sandbox kind {kind!r}: use 'docker' or 'local'")

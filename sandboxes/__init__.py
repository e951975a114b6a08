"""Sandboxes for agents: the `Sandbox` protocol and its backends.

    async with await create_sandbox("local", SandboxSpec(gateway_url=url, limits=Limits(memory_bytes=2**30))) as sb:
        result = await sb.exec("curl -s $HARNESSRL_GATEWAY_URL/models", timeout_s=30)

Backends (`sandboxes.kinds`): "docker" (docker SDK; `--network none` plus the gateway socket), "local"
(bubblewrap when installed, else an unisolated subprocess) and "harbor:<type>" (an environment of
Harbor's, driven in Harbor's own Python: `sandboxes.harbor`). This package imports nothing else of harnessrl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandboxes.protocol import WORKSPACE, ExecResult, KilledReason, Limits, Sandbox, SandboxError, SandboxSpec

if TYPE_CHECKING:
    from sandboxes.kinds import Kind

SandboxKind = str  # a kind's name: "local" | "docker" | "harbor:<type>" (sandboxes.kinds)

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


async def create_sandbox(kind: Kind | SandboxKind, spec: SandboxSpec, **options) -> Sandbox:
    """Create and start a sandbox of ``kind`` (``sandboxes.kinds``: SandboxError naming the kinds for another).
    Options go to the backend: `isolation` for local ("auto" | "bwrap" | "subprocess"), `client` (a
    docker.DockerClient) for docker, the environment's own options (Harbor's kwargs) for harbor:<type>."""
    from sandboxes.kinds import as_kind

    return await as_kind(kind).create(spec, options)

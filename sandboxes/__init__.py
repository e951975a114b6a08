"""Sandboxes for agents: the `Sandbox` protocol and its backends.

    async with await create_sandbox("local", SandboxSpec(gateway_url=url, limits=Limits(memory_bytes=2**30))) as sb:
        result = await sb.exec("curl -s $HARNESSRL_GATEWAY_URL/models", timeout_s=30)

Backends (`sandboxes.kinds`): "docker" (docker SDK; `--network none` plus the gateway socket), "local"
(bubblewrap when installed, else an unisolated subprocess) and "harbor:<type>" (an environment of
Harbor's, driven in Harbor's own Python: `sandboxes.harbor`). This package imports nothing else of harnessrl.
"""

from __future__ import annotations

from sandboxes.protocol import WORKSPACE, ExecResult, KilledReason, Limits, Sandbox, SandboxError, SandboxSpec

SandboxKind = str  # "local" | "docker" | "harbor:<type>" (sandboxes.kinds)

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
    ("auto" | "bwrap" | "subprocess"), `client` (a docker.DockerClient) for docker, the environment's
    own options (Harbor's kwargs) for harbor:<type>."""
    if kind.startswith("harbor:"):
        from sandboxes.harbor import HarborSandbox
        from sandboxes.kinds import sandbox_kind

        return await HarborSandbox.create(spec, sandbox_kind(kind).harbor_type, options)
    if kind == "local":
        from sandboxes.local import LocalSandbox

        return await LocalSandbox.create(spec, **options)
    if kind == "docker":
        from sandboxes.docker import DockerSandbox  # the docker SDK only when asked for

        return await DockerSandbox.create(spec, **options)
    from sandboxes.kinds import sandbox_kind

    sandbox_kind(kind)  # raises, naming the kinds
    raise SandboxError(f"no backend for sandbox kind {kind!r}")

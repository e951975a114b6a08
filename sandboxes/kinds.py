"""The sandbox kinds, in one place: what `--sandbox` accepts and what each kind implies.

    local           bubblewrap (or, asked for by name, an unisolated subprocess) over the host's dirs
    docker          a container of this machine's Docker daemon, network none plus the bridge
    harbor:<type>   an environment of Harbor's (podman, daytona, modal, e2b, gke, ...), anywhere

The CLI, the task checks, the harnesses and the runner read a `Kind` instead of comparing names, and
`sandboxes.create_sandbox` starts the kind's backend, so a new backend is its module and one entry in ``KINDS``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sandboxes.isolation import local_isolation
from sandboxes.protocol import SandboxError, SandboxSpec

HARBOR = "harbor:"
HARBOR_BACKEND = "sandboxes.harbor:HarborSandbox"  # every harbor:<type>, driven in Harbor's own Python


@dataclass(frozen=True)
class Kind:
    name: str  # as given to --sandbox: "local", "docker", "harbor:podman", ...
    runs_images: bool  # the sandbox runs an image with the agent installed (else the host's install)
    bridged: bool  # reaches the gateway through this worker's bridge (else at the gateway's public URL)
    harbor_type: str | None = None  # Harbor's environment type, for harbor:<type>
    # "module:Class" of its Sandbox, imported when the first starts (the docker SDK only when asked for);
    # Class.create(spec, **options) starts one, or Class.create(spec, harbor_type, options) for harbor:<type>.
    backend: str = ""

    def __str__(self) -> str:  # as --sandbox names it, in messages and --show-config
        return self.name

    async def create(self, spec: SandboxSpec, options: Mapping[str, object]):
        """A started sandbox of this kind: the backend's ``create`` with the kind's options."""
        module, _, name = self.backend.partition(":")
        if not name:
            raise SandboxError(f"no backend for sandbox kind {self.name!r}: name its Sandbox class in KINDS")
        backend = getattr(importlib.import_module(module), name)
        if self.harbor_type is not None:
            return await backend.create(spec, self.harbor_type, options)
        return await backend.create(spec, **options)


# The kinds by name (Harbor's family, harbor:<type>, after them): a new backend is one entry here.
KINDS = {
    kind.name: kind
    for kind in (
        Kind("local", runs_images=False, bridged=True, backend="sandboxes.local:LocalSandbox"),
        Kind("docker", runs_images=True, bridged=True, backend="sandboxes.docker:DockerSandbox"),
    )
}


def kind_names() -> tuple[str, ...]:
    """What --sandbox accepts, as its help and errors list them."""
    return (*KINDS, f"{HARBOR}<type>")


def choices() -> str:
    """The kinds as CLI help writes a choice."""
    return " | ".join(kind_names())


def sandbox_kind(name: str) -> Kind:
    """The kind named ``name``; SandboxError listing the kinds for any other name."""
    if name in KINDS:
        return KINDS[name]
    if name.startswith(HARBOR) and name[len(HARBOR) :].strip():
        harbor_type = name[len(HARBOR) :].strip()
        return Kind(name, runs_images=True, bridged=False, harbor_type=harbor_type, backend=HARBOR_BACKEND)
    raise SandboxError(f"--sandbox must be one of {', '.join(kind_names())} (e.g. harbor:podman), not {name!r}")


def as_kind(kind: Kind | str) -> Kind:
    """``kind`` itself, or the kind a name names (``sandbox_kind``): a config reads its kind once
    (harnessrl.config.sections.SandboxKind) and passes the ``Kind`` down; a name is for callers of
    `sandboxes.create_sandbox` and the like that have only the name."""
    return kind if isinstance(kind, Kind) else sandbox_kind(kind)


def bridged_kinds() -> list[str]:
    """The kinds that reach the gateway through this host's bridge (a loopback gateway is enough)."""
    return [name for name, kind in KINDS.items() if kind.bridged]


def option_pairs(pairs: Iterable[str]) -> dict[str, object]:
    """``--sandbox-option key=value`` pairs as the backend's options: a value that is JSON (a number,
    a list, true) is decoded, any other value is the string itself."""
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SandboxError(f"--sandbox-option takes key=value, not {pair!r}")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def backend_options(kind: Kind, allow_unisolated: bool, given: Mapping[str, object] | None = None) -> dict:
    """The options `create_sandbox` gets for every sandbox of a run: local's isolation, Harbor's own."""
    given = dict(given or {})
    if kind.harbor_type is not None:
        return given
    if given:  # local's isolation is checked here (--allow-unisolated), never overridden by an option
        raise SandboxError(f"--sandbox-option is for harbor:<type> sandboxes, not {kind.name}")
    return {"isolation": local_isolation(allow_unisolated)} if kind.name == "local" else {}


async def checked_options(kind: Kind, allow_unisolated: bool, given: Mapping[str, object] | None = None) -> dict:
    """`backend_options`, after Harbor's own check of a harbor:<type> kind (its extra installed, its
    options and credentials there): a run fails here, before any rollout, with Harbor's message."""
    options = backend_options(kind, allow_unisolated, given)
    if kind.harbor_type is not None:
        from sandboxes.harbor_images import REGISTRY_OPTION
        from sandboxes.harbor_process import preflight

        await preflight(kind.harbor_type, {k: v for k, v in options.items() if k != REGISTRY_OPTION})
        if kind.harbor_type == "podman":  # a host whose podman cannot start a container fails here, not per rollout
            from sandboxes.podman_host import preflight_podman

            await preflight_podman()
    return options

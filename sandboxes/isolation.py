"""Which isolation a local sandbox gets: bubblewrap, or (only when asked for by name) an unisolated
subprocess, with the checks that name the fix when neither can run here."""

from __future__ import annotations

import logging
import os
import shutil

from sandboxes import bwrap
from sandboxes.protocol import SandboxError, SandboxSpec

logger = logging.getLogger(__name__)


def resolve_isolation(isolation: str, allow_unisolated: bool = False) -> str:
    """The isolation a local sandbox gets: "bwrap" or "subprocess"; an error naming the fix otherwise."""
    if isolation == "auto":
        isolation = "bwrap" if bwrap.bwrap_path() or not allow_unisolated else "subprocess"
    if isolation == "bwrap" and not bwrap.bwrap_path():
        raise SandboxError(
            "bubblewrap not found: apt-get install -y bubblewrap (or, for trusted agents only, "
            "run them unisolated on purpose: `harnessrl run --allow-unisolated`, "
            "isolation='subprocess')"
        )
    if isolation == "subprocess":
        logger.warning(
            "local sandbox UNISOLATED: agents run as this user with the host's files and network; "
            "use it for trusted agents only (apt-get install -y bubblewrap isolates them)"
        )
    elif isolation != "bwrap":
        raise SandboxError(f"unknown isolation {isolation!r}: use 'bwrap', 'subprocess' or 'auto'")
    return isolation


def local_isolation(allow_unisolated: bool) -> str:
    """What the local sandboxes of a run get, checked once before the first: "bwrap", or "subprocess"
    when bubblewrap is missing and unisolated agents were allowed; SandboxError naming the fix."""
    isolation = resolve_isolation("auto", allow_unisolated)
    if isolation == "subprocess":
        check_private_mounts(SandboxSpec().writable_dirs)
    return isolation


def check_private_mounts(writable_dirs: tuple[str, ...]) -> None:
    """An unisolated sandbox binds its own writable dirs over the host's: needs root and unshare."""
    if not writable_dirs:
        return
    if os.geteuid() != 0 or not shutil.which("unshare"):
        raise SandboxError(
            f"an unisolated sandbox gets its own {', '.join(writable_dirs)} through a private "
            "mount namespace, which needs root and unshare (util-linux): install bubblewrap "
            "instead (apt-get install -y bubblewrap)"
        )
    for path in writable_dirs:
        os.makedirs(path, exist_ok=True)  # the mount point; nothing is ever written to the host's copy

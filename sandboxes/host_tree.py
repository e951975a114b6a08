"""A local sandbox's private host folders: made, filled from a task image's root, copied for grading and
emptied, without ever following a link the agent made on the host."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from sandboxes.protocol import SandboxError

logger = logging.getLogger(__name__)


def prepare_root(root: str, mount_points: list[str]) -> None:
    """Mount points the root lacks, made in it (bubblewrap cannot make them under a read-only bind):
    the root is a cache of ours (an exported image), so empty folders in it change nothing else."""
    for inside in mount_points:
        target = Path(root) / inside.lstrip("/")
        if inside.count("/") > 1 and not target.exists():  # top-level ones bubblewrap makes itself
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SandboxError(
                    f"the sandbox root {root} lacks {inside} and it cannot be made there "
                    f"({exc}): give a root folder this user may write to"
                ) from None


def copy_tree(source: Path, into: Path) -> None:
    """The root's content at the workspace's path (a Harbor image's WORKDIR), copied into the
    private workspace: the agent starts with the image's files there and may change them."""
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, into, symlinks=True, dirs_exist_ok=True)


def replace_tree(source: Path, target: Path) -> None:
    """target made an exact copy of source: links copied as links (never followed on the host), and
    what cannot be copied (a fifo, a socket, a file the agent made unreadable) left out, logged."""
    recreate(target)
    try:
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    except shutil.Error as exc:
        logger.warning("grading copy of %s left out %d entries: %s", source, len(exc.args[0]), exc.args[0][:5])


def recreate(path: Path) -> None:
    """Whatever is at path (a tree, a file, a link) removed, then a new empty directory."""

    def unlock(function, name, _exc_info):  # a folder the agent made unreadable or unwritable
        os.chmod(os.path.dirname(name), 0o700)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, 0o700)
        function(name)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=unlock)
    else:
        path.unlink(missing_ok=True)
    path.mkdir(mode=0o755)


def write_file(target: Path, data: bytes, mode: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    target.chmod(mode)

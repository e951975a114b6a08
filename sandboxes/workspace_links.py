"""Links in the agent's workspace that lead out of it, found and removed before the verifier runs.

The agent's work is its files, not links to anything outside its workspace: ``answer.txt ->
/tests/expected.txt`` would hand the verifier its own expected output once the tests are uploaded.
So, after every process of the agent is stopped, each symbolic link under the workspace is resolved
as the sandbox's kernel would resolve it (`outside_links`): its target, component by component, from
the link's folder (or from / for an absolute one), following the workspace's other links (chains,
links to folders, up to Linux's 40). It is refused as soon as that path leaves the workspace: a name
that leads off the way to it (/tests, /logs, /tmp, /usr ...), or ``..`` taken at the workspace's top.
The target need not exist: /tests is made only after this check, so a dangling link into it is the
attack itself. What resolves inside the workspace, relative or absolute (``/app/data/x``), is kept.

The links are read in the sandbox's own view, never followed on the host: a local sandbox's
workspace folder is walked on the host with lstat and readlink (`host_links`); a container's by
`LIST_SCRIPT` run inside as root. Hard links need no check: /tests and /logs/verifier are made new
right before the verifier, so nothing made earlier shares their files, and a copy into a fresh
sandbox carries only the workspace.
"""

from __future__ import annotations

import base64
import binascii
import os
import posixpath
import shlex
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandboxes.protocol import SandboxError

MAX_HOPS = 40  # links one resolution may follow (Linux's MAXSYMLINKS): a longer chain or a loop is refused
# The verifier's folders: a link into one is refused even where the workspace holds them (a workspace of
# "/", an image whose WORKDIR is the root), as they are made or filled only after this check.
VERIFIER_FOLDERS = frozenset({"tests", "logs", "solution"})
REMOVAL_BATCH = 60_000  # base64 characters per removal command (Linux: at most 128 KiB per argument)

# Every link under the workspace ($1): its path and target, NUL-separated, base64 (Harbor's exec merges
# stderr into stdout and may add a TTY's carriage returns). Run as root, nothing of the image but sh,
# find, readlink, base64 and mktemp; `$(readlink ...; echo .)` keeps a target's trailing newlines.
LIST_SCRIPT = r"""
[ -e "$1" ] || [ -L "$1" ] || exit 0
out=$(mktemp) || exit 1
if find "$1" -type l -exec sh -c '
for l do t=$(readlink -- "$l" && echo .) || exit 1; printf "%s\0%s\0" "$l" "${t%??}"; done' sh {} + >"$out" 2>"$out.err"
then base64 "$out"; code=$?
else cat "$out.err" >&2; code=1
fi
rm -f -- "$out" "$out.err"
exit $code
"""


@dataclass(frozen=True)
class Link:
    path: str  # inside the sandbox, relative to the workspace ("." for the workspace itself)
    target: str  # as the agent wrote it

    def __str__(self) -> str:
        """``path -> target``, printable as UTF-8 whatever bytes the names hold (``\\xff`` for one)."""
        return f"{_shown(self.path)} -> {_shown(self.target)}"


def _shown(name: str) -> str:
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def outside_links(workspace: str, links: Mapping[str, str]) -> list[Link]:
    """Of the links (absolute inside path -> target) under `workspace`, those that leave it, by path."""
    root = _parts(workspace)
    table = {_parts(path): target for path, target in links.items()}
    refused = [path for path in table if _leaves(root, table, path)]
    return [Link("/".join(path[len(root) :]) or ".", table[path]) for path in sorted(refused)]


def _leaves(root: tuple[str, ...], links: Mapping[tuple[str, ...], str], link: tuple[str, ...]) -> bool:
    """Whether resolving `link` leaves the workspace `root` (paths as tuples of names)."""
    if link == root:
        return True  # the workspace itself must be a folder
    path, todo, hops = list(link[:-1]), [], 0
    _push(path, todo, links[link])
    while todo:
        name = todo.pop()
        if name == "..":
            if len(path) <= len(root):
                return True  # above the workspace (its parent may be anywhere: never trust the way back)
            path.pop()
            continue
        path.append(name)
        if not _on_the_way(root, path) or path[0] in VERIFIER_FOLDERS:
            return True
        target = links.get(tuple(path))
        if target is not None:
            hops += 1
            if hops >= MAX_HOPS:
                return True
            path.pop()
            _push(path, todo, target)
    return len(path) < len(root)  # an absolute path ending on the way down: "/" or one of its parents


def _push(path: list[str], todo: list[str], target: str) -> None:
    """A link's target onto the work list (last name first), from / when it is absolute."""
    if target.startswith("/"):
        path.clear()
    todo.extend(reversed([name for name in target.split("/") if name not in ("", ".")]))


def _on_the_way(root: tuple[str, ...], path: list[str]) -> bool:
    """path is the workspace, under it, or one of its parents (an absolute target on its way down)."""
    shorter = min(len(root), len(path))
    return tuple(path[:shorter]) == root[:shorter]


def _parts(path: str) -> tuple[str, ...]:
    return tuple(name for name in posixpath.normpath(path).split("/") if name)


# -- reading and removing links ------------------------------------------------------------------


def refuse_host_links(folder: Path, inside: str) -> list[Link]:
    """The links under `folder` (the host folder behind the workspace at `inside`) that leave the
    workspace, removed (unlink never follows one); the workspace made a new empty folder when it was
    itself a link. The links removed."""
    refused = outside_links(inside, host_links(folder, inside))
    for link in refused:
        target = folder / link.path
        target.unlink(missing_ok=True)
        if link.path == ".":
            target.mkdir(mode=0o755)
    return refused


def host_links(folder: Path, inside: str) -> dict[str, str]:
    """Every link under `folder` (the host folder behind the workspace at `inside`), as inside path ->
    target, read with lstat and readlink alone. A folder the agent made unreadable is opened for the
    reading and given its mode back; SandboxError when one still cannot be read."""
    if folder.is_symlink():
        return {inside: os.readlink(folder)}
    found: dict[str, str] = {}
    stack = [(str(folder), inside)]
    while stack:
        host, where = stack.pop()
        for name, target, is_dir in _entries(host):
            if target is not None:
                found[posixpath.join(where, name)] = target
            elif is_dir:
                stack.append((os.path.join(host, name), posixpath.join(where, name)))
    return found


def _entries(host: str) -> list[tuple[str, str | None, bool]]:
    """(name, link target or None, is a folder) of a real folder's entries."""
    mode = os.lstat(host).st_mode
    opened = not os.access(host, os.R_OK | os.X_OK)
    if opened:
        os.chmod(host, 0o700)  # a real folder of this sandbox's (never a link: those are not walked)
    try:
        with os.scandir(host) as scanned:
            entries = list(scanned)
        return [
            (e.name, os.readlink(e.path) if e.is_symlink() else None, e.is_dir(follow_symlinks=False)) for e in entries
        ]
    except OSError as exc:
        raise SandboxError(f"the workspace's folder {host} cannot be read to check its links: {exc}") from None
    finally:
        if opened:
            os.chmod(host, stat.S_IMODE(mode))


def parse_listing(output: bytes | str) -> dict[str, str]:
    """`LIST_SCRIPT`'s output: inside path -> target; SandboxError when it is not what it prints."""
    text = output.decode("ascii", "replace") if isinstance(output, bytes) else output
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except binascii.Error:
        raise SandboxError(f"the workspace's links could not be listed: {text[-500:]!r}") from None
    fields = raw.split(b"\0")
    if len(fields) % 2 != 1 or fields[-1]:
        raise SandboxError(f"the workspace's links could not be listed: {raw[-500:]!r}")
    return {os.fsdecode(path): os.fsdecode(target) for path, target in zip(fields[:-1:2], fields[1::2])}


async def refuse_inside(workspace: str, run: Callable[[str], Awaitable[bytes | str]], first: str = "") -> list[Link]:
    """For a sandbox whose shell runs command lines of ours as root (docker, Harbor): its links listed
    by `LIST_SCRIPT` (after `first`, in the same call), those that leave the workspace removed."""
    listing = list_command(workspace)
    refused = outside_links(workspace, parse_listing(await run(f"{first}; {listing}" if first else listing)))
    for command in removal_commands(workspace, refused) if refused else ():
        await run(command)
    return refused


def list_command(workspace: str) -> str:
    """A shell command line running `LIST_SCRIPT` on the workspace."""
    return f"sh -c {shlex.quote(LIST_SCRIPT)} sh {shlex.quote(workspace)}"


def removal_commands(workspace: str, refused: list[Link]) -> list[str]:
    """Shell command lines, run as root inside, that remove the refused links: their paths base64 in
    the command (any bytes), decoded into ``xargs -0 rm``; the workspace made again when it was one."""
    paths = [os.fsencode(posixpath.normpath(posixpath.join(workspace, link.path))) for link in refused]
    commands, batch = [], b""
    for path in paths:
        if batch and len(batch) + len(path) > REMOVAL_BATCH * 3 // 4:
            commands.append(_removal(batch))
            batch = b""
        batch += path + b"\0"
    commands.append(_removal(batch))
    commands[-1] += f" && mkdir -p -- {shlex.quote(workspace)}"
    return commands


def _removal(paths: bytes) -> str:
    return f"printf %s {base64.b64encode(paths).decode()} | base64 -d | xargs -0 rm -f --"

"""Where harnessrl keeps its data, and the defaults every command shares."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from store.database import sqlite_url


def data_home() -> Path:
    """``$HARNESSRL_HOME``, default ``~/.local/share/harnessrl``: database, logs, adapters."""
    configured = os.environ.get("HARNESSRL_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".local/share/harnessrl"


def default_database_url() -> str:
    return sqlite_url(data_home() / "harnessrl.db")


def logs_dir() -> Path:
    path = data_home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


ADMIN_KEY_ENV = "HARNESSRL_ADMIN_KEY"
ADMIN_KEY_FILE = "admin.key"


class AdminKeyError(RuntimeError):
    """No admin key to be found, or a key file that is unsafe to use; the message names the fix."""


def admin_key_path() -> Path:
    """``$HARNESSRL_HOME/admin.key``: the key `harnessrl serve` uses when none is given."""
    return data_home() / ADMIN_KEY_FILE


def admin_key(given: str | None = None, *, create: bool = False) -> str:
    """The control plane's admin key: the one given (``--admin-key``), else ``$HARNESSRL_ADMIN_KEY``,
    else the content of ``$HARNESSRL_HOME/admin.key``; ``create`` (the gateway) writes that file
    with a fresh random key when it is missing. Clients (run, train, ls, ...) never create one."""
    key = (given or os.environ.get(ADMIN_KEY_ENV) or "").strip()
    if key:
        return key
    path = admin_key_path()
    found = _read_key_file(path)
    if found:
        return found
    if not create:
        raise AdminKeyError(
            f"no admin key: {path} does not exist; start the gateway with `harnessrl serve` (it writes that "
            f"file), or pass --admin-key / set {ADMIN_KEY_ENV} to the key the gateway was given"
        )
    return _create_key_file(path)


def _read_key_file(path: Path) -> str | None:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    if mode & 0o077:
        raise AdminKeyError(
            f"{path} is readable by other users (mode {mode & 0o777:o}): "
            f"run `chmod 600 {path}`, or delete it for a fresh key"
        )
    key = path.read_text().strip()
    if not key:
        raise AdminKeyError(f"{path} is empty: delete it, and `harnessrl serve` writes a fresh key")
    return key


def _create_key_file(path: Path) -> str:
    """Write a fresh key atomically (mode 0600); a concurrent writer's key wins if it landed first."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(32)
    staged = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(staged, path)  # never replaces: the first key written is the one kept
        except FileExistsError:
            return _read_key_file(path) or key
    finally:
        staged.unlink(missing_ok=True)
    return key

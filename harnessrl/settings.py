"""Where harnessrl keeps its data, and the defaults every command shares."""

from __future__ import annotations

import os
from pathlib import Path

from gateway.store.database import sqlite_url


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

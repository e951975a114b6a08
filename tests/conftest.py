"""Fixtures shared by every tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.store.database import sqlite_url
from migrations.runner import upgrade


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    """A migrated SQLite database in a fresh file."""
    url = sqlite_url(tmp_path / "harnessrl.db")
    upgrade(url)
    return url

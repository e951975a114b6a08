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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny random model (Qwen2-style, ChatML template), built offline once per session."""
    from harnessrl.model_prep import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")

"""The migrations build the schema the table models describe, and the latest one goes down and up again."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, text

from migrations.runner import alembic_config, upgrade
from store.database import sqlite_url
from store.tables import Base

# Indexes only the migrations declare (0005: their columns differ per database, see its docstring).
MIGRATION_ONLY = {"ix_calls_finish_reason", "ix_calls_rollout_stats"}


def schema_differences(path: Path) -> list:
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        found = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    return [d for d in found if not (d[0] == "remove_index" and d[1].name in MIGRATION_ONLY)]


def test_the_migrated_schema_is_the_table_models(tmp_path: Path):
    upgrade(sqlite_url(tmp_path / "db.sqlite"))
    assert schema_differences(tmp_path / "db.sqlite") == []


def test_the_latest_migration_goes_down_and_up_again_keeping_the_rows(tmp_path: Path):
    path = tmp_path / "db.sqlite"
    upgrade(sqlite_url(path), "0005")
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO runs (name, config, created_at) VALUES ('r', '{}', '2026-01-01')"))
    upgrade(sqlite_url(path))
    command.downgrade(alembic_config(sqlite_url(path)), "0005")
    upgrade(sqlite_url(path))
    with engine.connect() as connection:
        assert connection.execute(text("SELECT name FROM runs")).scalars().all() == ["r"]
    engine.dispose()
    assert schema_differences(path) == []

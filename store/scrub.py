"""What was deleted or redacted leaves the database's files too, not only its tables.

A redaction (``keys scan``) or a deletion (``keys forget``) changes rows, but the old bytes can stay in
the files: SQLite appends every changed page to the ``-wal`` file and only copies it back at a
checkpoint, and a freed page keeps its old content. So every SQLite connection zeroes what it deletes
(``secure_delete``, set in ``store.database.sqlite_pragmas``) and, after a redaction or a deletion,
``scrub`` checkpoints the WAL into the main file and truncates it to zero bytes. PostgreSQL keeps dead
row versions until VACUUM and its WAL segments until they are recycled: ``scrub`` runs VACUUM on the
tables, which makes the space reusable but does not overwrite it; only ``VACUUM FULL`` (a rewrite that
locks the table) and the WAL's recycling remove the bytes (docs/security.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

PERSONAL_TABLES = ("calls", "rollouts", "live_keys", "tasks", "groups")  # what a person's text or name is in
CHECKPOINT_TRIES = 20  # a reader in the middle of a transaction holds the WAL; it ends within moments
CHECKPOINT_BACKOFF_S = 0.05  # doubled per try, up to 1 s


class ScrubIncomplete(RuntimeError):
    """The WAL could not be truncated (a reader held it throughout); the message names the fix."""


async def scrub(engine: AsyncEngine, tables: Sequence[str]) -> None:
    """Remove the old versions of ``tables``' changed rows from the database's files (see the module)."""
    if engine.dialect.name == "sqlite":
        await _truncate_wal(engine)
    elif engine.dialect.name == "postgresql":
        async with engine.connect() as connection:
            autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
            for table in tables:
                await autocommit.exec_driver_sql(f'VACUUM "{table}"')


async def _truncate_wal(engine: AsyncEngine) -> None:
    delay = CHECKPOINT_BACKOFF_S
    for _ in range(CHECKPOINT_TRIES):
        async with engine.connect() as connection:
            busy, _frames, _copied = (await connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))).one()
        if not busy:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
    raise ScrubIncomplete(
        "the database's WAL still holds the old rows: a reader kept it open; run the command again "
        "(the rows themselves are already redacted or deleted)"
    )

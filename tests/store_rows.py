"""Reading a test's SQLite store straight from its rows, apart from the store's own code (an independent check)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.orm import Session


@contextmanager
def row_session(db_path: Path | str) -> Iterator[Session]:
    """A synchronous session on the SQLite file, its engine disposed on exit."""
    engine = create_engine(f"sqlite:///{db_path}")
    try:
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()

"""Applying migrations from code (`harnessrl db upgrade`, `harnessrl serve`, tests)."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config

from store.database import prepare_sqlite_file, with_async_driver

HERE = Path(__file__).resolve().parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(HERE))
    # ConfigParser interpolation would eat '%' in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` to ``revision``; safe to call from inside an event loop."""
    url = with_async_driver(url)
    prepare_sqlite_file(url)  # its folder, and a new file private (0600)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            command.upgrade(alembic_config(url), revision)
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    # env.py drives an async engine with asyncio.run, which needs a thread without a loop.
    thread = threading.Thread(target=run, name="alembic-upgrade")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]

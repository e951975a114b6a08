"""Every row of a SQLite store, to show that a refused request changed nothing."""

from __future__ import annotations

import sqlite3

from sqlalchemy.engine import make_url


def store_snapshot(database_url: str) -> dict[str, list[tuple]]:
    """Each table's rows (sorted), read over a plain sqlite3 connection of its own."""
    path = make_url(database_url).database
    with sqlite3.connect(path) as db:
        tables = [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]
        return {table: sorted(db.execute(f'select * from "{table}"').fetchall(), key=repr) for table in tables}

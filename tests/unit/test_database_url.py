"""Store URLs as people write them: ``sqlite:///x.db`` and ``postgresql://...`` get the async drivers the
store runs on; a driver it cannot use is a message naming the accepted forms, on the CLI too."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from harnessrl.cli.app import app
from store.database import with_async_driver


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("sqlite:///runs/x.db", "sqlite+aiosqlite:///runs/x.db"),
        ("postgresql://u:p%40ss@db:5432/h", "postgresql+asyncpg://u:p%40ss@db:5432/h"),
        ("postgres://u@db/h", "postgresql+asyncpg://u@db/h"),
        ("sqlite+aiosqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db"),
        ("postgresql+asyncpg://u@db/h", "postgresql+asyncpg://u@db/h"),
    ],
)
def test_a_url_without_an_async_driver_gets_the_stores(given, used):
    assert with_async_driver(given) == used


@pytest.mark.parametrize("given", ["postgresql+psycopg2://u@db/h", "mysql://u@db/h", "not a url"])
def test_a_driver_the_store_cannot_use_names_the_accepted_forms(given):
    with pytest.raises(ValueError, match="use sqlite:///PATH or postgresql://"):
        with_async_driver(given)


def test_the_cli_reads_a_plain_sqlite_url_and_refuses_an_unusable_one(tmp_path):
    db = tmp_path / "store.db"
    upgraded = CliRunner().invoke(app, ["db", "upgrade", "--database-url", f"sqlite:///{db}"])
    assert upgraded.exit_code == 0, upgraded.output
    listed = CliRunner().invoke(app, ["ls", "runs", "--database-url", f"sqlite:///{db}"])
    assert listed.exit_code == 0 and "Traceback" not in listed.output, listed.output
    refused = CliRunner().invoke(app, ["ls", "runs", "--database-url", "mysql://u@db/h"], env={"COLUMNS": "300"})
    assert refused.exit_code == 1 and "cannot use the driver 'mysql'" in refused.output

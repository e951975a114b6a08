"""The layout's rules, checked on the code: modules of a size a reader can hold (at most 400 lines,
tests included, migrations aside), and SQL owned by the store alone (outside ``store/`` and ``migrations/`` nothing
imports SQLAlchemy but to catch its errors, and the store's public reads return its own records)."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

from tests.unit.test_import_cycles import PACKAGES, ROOT

MAX_LINES = 400
SQL_OWNERS = ("store", "migrations")


def product_files(packages=PACKAGES) -> list[Path]:
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def sqlalchemy_imports(path: Path) -> list[str]:
    """The SQLAlchemy modules ``path`` imports, anywhere in it, but ``sqlalchemy.exc`` (errors caught)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "sqlalchemy"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            found.append(node.module)
    return [name for name in found if name != "sqlalchemy.exc"]


def test_no_module_outside_migrations_is_over_400_lines():
    files = product_files((*(p for p in PACKAGES if p != "migrations"), "tests"))  # the tests are modules too
    assert len(files) > 400
    too_long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}


def test_only_the_store_imports_sqlalchemy_except_to_catch_its_errors():
    outside = [p for p in product_files() if p.relative_to(ROOT).parts[0] not in SQL_OWNERS]
    found = {str(p.relative_to(ROOT)): names for p in outside if (names := sqlalchemy_imports(p))}
    assert found == {}


def test_the_finder_sees_an_import_of_sqlalchemy_inside_a_function(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from sqlalchemy import select\n    from sqlalchemy.exc import DBAPIError\n")
    assert sqlalchemy_imports(planted) == ["sqlalchemy"]


def test_the_stores_public_reads_return_no_sqlalchemy_type():
    """Every public coroutine of the store and its repositories is annotated with records of its own."""
    from store.adapters import Adapters
    from store.calls import CallReads
    from store.listings import Listings
    from store.store import Store

    checked = 0
    for owner in (Store, Listings, CallReads, Adapters):
        for name, function in inspect.getmembers(owner, inspect.iscoroutinefunction):
            if name.startswith("_"):
                continue
            returned = str(typing.get_type_hints(function, vars(inspect.getmodule(function))).get("return"))
            checked += 1
            assert "sqlalchemy" not in returned and "store.tables" not in returned, (owner.__name__, name, returned)
    assert checked > 30

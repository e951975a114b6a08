"""The layout's rules, checked on the code: modules of a size a reader can hold (at most 400 lines,
tests included, migrations aside), SQL owned by the store alone (outside ``store/`` and ``migrations/`` nothing
imports SQLAlchemy but to catch its errors, and the store's public reads return its own records), thin commands
(every command's body at most 20 statements: its options and a call, and at most 10 parameters: more options are a
config whose keys they are) and functions of a few parameters where a config carries the rest."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from pathlib import Path

from tests.unit.test_import_cycles import PACKAGES, ROOT

MAX_LINES = 400
SQL_OWNERS = ("store", "migrations")
MAX_COMMAND_STATEMENTS = 20  # a command's body, after its docstring
MAX_PARAMETERS = 8  # self and cls not counted
MAX_COMMAND_PARAMETERS = 10  # a command's function as written (harnessrl/cli/), its options beyond: a config's keys
# The CLI's commands take their options as parameters (typer reads a command's options off its signature).
PARAMETERS_EXEMPT = ("harnessrl", "cli")
# The commands whose settings are a config (harnessrl/config/).
CONFIGURED_COMMANDS = ("run_rollouts", "eval_policies", "quickstart", "train", "serve", "sft", "ls")


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


def body_statements(function: ast.FunctionDef) -> int:
    """The statements of ``function``'s body, nested ones counted, its docstring not."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    return sum(1 for statement in body for node in ast.walk(statement) if isinstance(node, ast.stmt))


def many_parameters(path: Path) -> dict[str, int]:
    """The functions of ``path`` taking more than MAX_PARAMETERS parameters, and how many."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
            if len(names) > MAX_PARAMETERS:
                found[node.name] = len(names)
    return found


def registered_commands(app, prefix: str = "") -> dict[str, typing.Callable]:
    """Every command of the typer ``app`` and its sub-apps, by its command line ("keys report"), as written: a
    decorator's wrapper (@config_command's) unwrapped."""
    found = {}
    for command in app.registered_commands:
        found[prefix + (command.name or command.callback.__name__)] = inspect.unwrap(command.callback)
    for group in app.registered_groups:
        found |= registered_commands(group.typer_instance, f"{prefix}{group.name} ")
    return found


def test_every_command_body_is_at_most_20_statements():
    """A command is its options and a call: the work lives in a module named for it (harnessrl/cli/jobs.py)."""
    from harnessrl.cli.app import app

    commands = registered_commands(app)
    assert len(commands) > 20 and {"serve", "db upgrade", "keys report"} <= set(commands)
    assert set(CONFIGURED_COMMANDS) <= {f.__name__ for f in commands.values()}  # found under their decorator
    parsed = {name: ast.parse(textwrap.dedent(inspect.getsource(f))).body[0] for name, f in commands.items()}
    assert {name: n for name, f in parsed.items() if (n := body_statements(f)) > MAX_COMMAND_STATEMENTS} == {}


def test_no_command_takes_more_than_10_parameters():
    """A command of many options is a config (harnessrl/config/): the options are made from its keys and its
    function takes the config (``config_command``)."""
    from harnessrl.cli.app import app

    counts = {name: len(inspect.signature(f).parameters) for name, f in registered_commands(app).items()}
    assert counts["serve"] == counts["sft"] == counts["ls"] == 1  # the config, under the decorator's options
    assert {name: n for name, n in counts.items() if n > MAX_COMMAND_PARAMETERS} == {}


def parameter_checked_files() -> list[Path]:
    """Every product module but the CLI's: a function there groups what it needs beyond 8 parameters
    into a record or the config it plays."""
    return [p for p in product_files() if p.relative_to(ROOT).parts[: len(PARAMETERS_EXEMPT)] != PARAMETERS_EXEMPT]


def test_no_function_outside_the_cli_takes_more_than_8_parameters():
    files = parameter_checked_files()
    assert len(files) > 250 and ROOT / "store/store.py" in files and ROOT / "harnessrl/cli/serve.py" not in files
    found = {str(p.relative_to(ROOT)): names for p in files if (names := many_parameters(p))}
    assert found == {}


def test_the_measures_see_a_long_body_and_a_long_signature(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('def f(self, a, b, c, d, e, f, g, h, i):\n    """doc"""\n' + "    x = 1\n" * 21)
    function = ast.parse(planted.read_text()).body[0]
    assert body_statements(function) == 21 and many_parameters(planted) == {"f": 9}

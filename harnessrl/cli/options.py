"""What several commands share: the console, failing with a message, the options of the store and the admin
key, and turning options into values (store URL, migrated store, admin key, judge, task selection, sandbox)."""

from __future__ import annotations

import typing
from typing import Annotated

import typer
from rich.console import Console

from harnessrl.cli.key_options import key_option
from harnessrl.config.sections import GatewayConfig, StoreConfig
from sandboxes.kinds import Kind, option_pairs

console = Console(stderr=True)

# The store and the admin key, which every command talking to the store or the gateway takes: the jobs'
# keys store.url and gateway.admin_key (harnessrl/config/sections.py), declared there once.
DatabaseUrl = key_option(StoreConfig, "url", "store.url").annotation
AdminKey = key_option(GatewayConfig, "admin_key", "gateway.admin_key").annotation
# The policy (store.policies: a named lineage of adapters) a command works on; a new name starts one.
PolicyOption = Annotated[
    str | None,
    typer.Option("--policy", help="The policy (named adapter lineage: pi, opencode, ada); a new name starts one"),
]


def fail(message: str) -> typer.Exit:
    """Print the error; the exit (code 1) for the caller to raise."""
    console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code=1)


def check_choice(option: str, value: str | None, choices: object) -> None:
    """Refuses ``value`` of ``option`` outside the ``Literal`` ``choices`` (None: the option was not given)."""
    allowed = typing.get_args(choices)
    if value is not None and value not in allowed:
        raise fail(f"{option} {value}: choose {' or '.join(allowed)}")


def checked_policy(name: str | None) -> str | None:
    """``name`` when it is a safe policy name (None stays None), else a CLI error naming the rule."""
    from store.policies import InvalidPolicyName, check_policy_name

    try:
        return None if name is None else check_policy_name(name)
    except InvalidPolicyName as exc:
        raise fail(f"--policy: {exc}") from None


def harness_policy(harness: str) -> str:
    """A run's policy when none is named: its harness's name (one adapter per agent), made a policy name."""
    import re

    from store.policies import DEFAULT_POLICY, InvalidPolicyName, check_policy_name

    name = re.sub(r"[^a-z0-9_-]", "-", harness.lower()).strip("-_")
    try:
        return check_policy_name(name)
    except InvalidPolicyName:
        return DEFAULT_POLICY


def resolve_database_url(url: str | None) -> str:
    """--database-url (its async driver added when it names none), else the SQLite store under $HARNESSRL_HOME."""
    from harnessrl.settings import default_database_url
    from store.database import with_async_driver

    try:
        return with_async_driver(url or default_database_url())
    except ValueError as exc:
        raise fail(f"--database-url / HARNESSRL_DATABASE_URL: {exc}") from None


def upgrade_store(url: str) -> None:
    """Apply the store's migrations, or a CLI error naming the setting."""
    from migrations.runner import upgrade

    try:
        upgrade(url)
    except Exception as exc:  # noqa: BLE001 - reported as a CLI message naming the setting
        raise fail(
            f"could not migrate {url}: {type(exc).__name__}: {exc}\ncheck --database-url / HARNESSRL_DATABASE_URL"
        ) from None


def resolve_admin_key(given: str | None, create: bool = False) -> str:
    """The admin key (harnessrl.settings.admin_key), or a CLI error naming where it is looked for."""
    from harnessrl.settings import AdminKeyError, admin_key

    try:
        return admin_key(given, create=create)
    except (AdminKeyError, OSError) as exc:
        raise fail(str(exc)) from None


def judge_settings(options):
    """The judge the --judge options ask for (None without --judge); a CLI message naming the fix otherwise."""
    try:
        return options.settings()
    except ValueError as exc:
        raise fail(str(exc)) from None


def task_selection(tasks):
    """The tasks a config's ``[tasks]`` chooses (``TasksConfig.selection``), or a CLI error naming the option."""
    from harnesses.task import TaskError

    try:
        return tasks.selection()
    except TaskError as exc:
        raise fail(str(exc)) from None


def with_store(url: str, work):
    """``work(store)`` on a store opened for it, closed after."""
    import asyncio

    from store.store import Store

    async def go():
        store = Store.from_url(url)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(go())


def checked_sandbox(
    sandbox: Kind | str,
    pairs: list[str] | dict | None,
    allow_unisolated: bool = False,
    loopback_gateway: bool = False,
    local_later: bool = False,
) -> dict:
    """--sandbox and its --sandbox-option pairs (or a config's options) as the backend's options, checked
    before anything starts (bubblewrap for local, Harbor's preflight for harbor:<type>): a CLI error naming the fix.
    ``loopback_gateway``: the command's gateway listens on loopback only, which a sandbox without a bridge
    (harbor:<type>, given the gateway's public URL) never reaches. ``local_later``: local's bubblewrap
    is left to the first sandbox to check (quickstart names a missing agent first)."""
    if local_later and str(sandbox) == "local" and not pairs:
        return {}
    import asyncio

    from sandboxes.kinds import as_kind, bridged_kinds, checked_options

    try:
        kind = as_kind(sandbox)  # a config's Kind, or a name
        if loopback_gateway and not kind.bridged:
            raise RuntimeError(
                f"--sandbox {sandbox} sandboxes reach the gateway at its public URL, and this command's gateway "
                "listens on loopback: start `harnessrl serve --public-url URL` and pass --gateway (a warm start's "
                f"teacher listens on loopback too: warm-start with a {' or '.join(bridged_kinds())} sandbox first)"
            )
        given = pairs if isinstance(pairs, dict) else option_pairs(pairs or [])  # a config's, or the flags'
        return asyncio.run(checked_options(kind, allow_unisolated, given))
    except RuntimeError as exc:  # SandboxError
        raise fail(str(exc)) from None

"""A job's command made from its config (``config_command``: an option per key, --config and --show-config),
and the config from what the command was given: its --config file, then every option given on the command line
(or by its environment variable) over it, each setting the key its ``Sets`` names; --show-config prints the
result and exits. Options left at their defaults set nothing, so a file's value stands."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, TypeVar

import typer
from pydantic import BaseModel
from rich.markup import escape

from harnessrl.cli.key_options import ConfigFile, Sets, ShowConfig, key_options
from harnessrl.cli.options import fail
from harnessrl.config.files import ConfigError, MissingKey, load_config, to_toml

GIVEN = ("COMMANDLINE", "ENVIRONMENT")  # click's ParameterSource names; DEFAULT sets nothing
Config = TypeVar("Config", bound=BaseModel)


def option_keys(command) -> dict[str, Sets]:
    """Each parameter of ``command`` that sets a config key, by name."""
    found = {}
    for name, parameter in inspect.signature(command, eval_str=True).parameters.items():
        marks = [m for m in getattr(parameter.annotation, "__metadata__", ()) if isinstance(m, Sets)]
        found.update({name: marks[0]} if marks else {})
    return found


def config_command(model: type[Config], prefixed: bool = False):
    """Decorate ``command(config: model)``: the command typer sees takes an option for every key of ``model``,
    --config and --show-config, and calls ``command`` with the config they describe. Adding a key to the config
    adds its option. ``prefixed``: a section's keys are ``--<section>-<key>`` (``key_options``)."""

    def decorate(command):
        options = list(key_options(model, prefixed=prefixed))
        names = [option.name for option in options] + ["ctx", "config", "show_config"]  # the last three: the wrapper's
        if len(set(names)) != len(names):
            raise TypeError(f"{model.__name__}: two keys have one flag: give one its own with cli(flag=...)")

        @functools.wraps(command)
        def wrapper(ctx: typer.Context, config: Path | None = None, show_config: bool = False, **values):
            return command(command_config(model, ctx, config, show_config))

        parameters = [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
            *(option.parameter() for option in options),
            inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ConfigFile),
            inspect.Parameter("show_config", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=ShowConfig),
        ]
        wrapper.__signature__ = inspect.Signature(parameters)
        wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
        return wrapper

    return decorate


def command_config(model: type[Config], context: typer.Context, file: Path | None, show: bool) -> Config:
    """``model`` from ``file`` and the options given to the command running in ``context``; a CLI error naming
    the file, the key and the fix when it cannot be read. ``show``: print it and exit."""
    keys = option_keys(context.command.callback)
    try:
        given = {keys[name].key: keys[name].convert(value) for name, value in _given(context, keys).items()}
        config = load_config(model, file, given)
    except MissingKey as exc:
        raise _missing(context, keys, exc, file) from None
    except (ConfigError, RuntimeError) as exc:  # RuntimeError: a bad --sandbox-option pair
        raise fail(escape(str(exc))) from None  # escaped: "[sandbox]" is a table, not markup
    if show:
        typer.echo(to_toml(config), nl=False)
        raise typer.Exit()
    return config


def _given(context: typer.Context, keys: dict[str, Sets]) -> dict[str, Any]:
    sources = {name: context.get_parameter_source(name) for name in context.params}
    return {
        name: value
        for name, value in context.params.items()
        if name in keys and getattr(sources[name], "name", None) in GIVEN
    }


def _missing(context: typer.Context, keys: dict[str, Sets], exc: MissingKey, file: Path | None) -> Exception:
    """A required key nobody gave: a usage error as click's "Missing option" without a file, else the file's
    error naming the option too."""
    name = next((name for name, sets in keys.items() if sets.key == exc.key), None)
    param = next((p for p in context.command.params if p.name == name), None)
    if param is None:
        return fail(str(exc))
    if file is None:
        try:
            context.fail(f"Missing option '{param.opts[-1]}'.")
        except Exception as usage:  # noqa: BLE001 - click's UsageError (typer keeps its own click)
            return usage
    return fail(f"{file}: missing key {exc.key}: set it there or give {param.opts[-1]}")

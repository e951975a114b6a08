"""A config's keys as a command's options. Every key of a job's config (harnessrl/config/) is declared once, on
its field: the option's help is the field's description, its range the field's, its default the config's, its
flag ``--<name>`` unless the field's ``cli(...)`` names another (and an environment variable, a one-letter flag,
how a list or table is written). An option marked ``Sets("section.key")`` sets that key, so ``--config FILE``
and the command line describe one thing (``harnessrl.cli.job_config``)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.markup import escape

from harnessrl.config.files import field_bounds, is_section
from sandboxes.kinds import option_pairs


def _as_given(value: Any) -> Any:
    return value


def comma_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


@dataclass(frozen=True)
class Sets:
    """An option's config key (dotted: ``sandbox.kind``) and how its value becomes the key's."""

    key: str
    convert: Callable[[Any], Any] = _as_given


ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A TOML file of this command's settings; options given here (or by their environment variables) "
        "override it. --show-config prints every key",
    ),
]
ShowConfig = Annotated[
    bool, typer.Option("--show-config", help="Print the settings (file, options, defaults) as TOML and exit")
]
TYPER_TYPES = (str, int, float, bool, Path)  # an option of another type is given by name
# How a list or a table is written on the command line (cli(given_as=...)): its option's type, its conversion.
GIVEN_AS = {"comma_list": (str, comma_list), "pairs": (list[str] | None, option_pairs)}


@dataclass(frozen=True)
class KeyOption:
    """One key's option: the command's parameter ``name``, typed and marked for typer, with its default."""

    key: str  # dotted: sandbox.kind
    name: str  # the parameter's name (the flag's, in snake case)
    annotation: Any
    default: Any

    def parameter(self) -> inspect.Parameter:
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=self.default, annotation=self.annotation
        )


def key_options(model: type[BaseModel], prefix: str = "", prefixed: bool = False) -> Iterator[KeyOption]:
    """An option for each key of ``model`` in field order, its sections' keys in place; a key whose type allows
    one value (a ``Literal`` of one) is fixed and has none. ``prefixed``: a section's key is ``--<section>-<key>``
    (``--lora-rank``) unless its field names its flag, so keys of two sections never share one."""
    for name, field in model.model_fields.items():
        if is_section(field.annotation):
            yield from key_options(field.annotation, f"{prefix}{name}.", prefixed)
        elif len(typing.get_args(field.annotation)) != 1 or typing.get_origin(field.annotation) is not typing.Literal:
            yield key_option(model, name, prefix + name, prefix.replace(".", "-") if prefixed else "")


def key_option(model: type[BaseModel], name: str, key: str | None = None, flag_prefix: str = "") -> KeyOption:
    """The option of ``model``'s field ``name``, setting ``key`` (default: the name); its flag ``--<flag_prefix>
    <name>`` unless the field names one."""
    field = model.model_fields[name]
    extra = _inherited(model, name, "json_schema_extra") or {}
    flag = extra.get("flag") or "--" + (flag_prefix + name).replace("_", "-")
    option_type, convert = GIVEN_AS.get(extra.get("given_as"), (_option_type(field), _as_given))
    help = escape(_inherited(model, name, "description"))  # shown as written: "[default: ...]" is no markup
    if extra.get("argument"):  # positional and required: typer says when it is missing
        argument = typer.Argument(help=help, metavar=name.upper(), show_default=False, **field_bounds(model, name))
        return KeyOption(key or name, name, Annotated[option_type, argument, Sets(key or name, convert)], ...)
    option = typer.Option(
        *[f for f in (extra.get("short"), flag) if f],
        help=help,
        envvar=extra.get("envvar"),
        **field_bounds(model, name),
    )
    annotation = Annotated[option_type, option, Sets(key or name, convert)]
    return KeyOption(key or name, flag.removeprefix("--").replace("-", "_"), annotation, _shown_default(field, extra))


def _inherited(model: type[BaseModel], name: str, attribute: str) -> Any:
    """The field's ``attribute`` (description, json_schema_extra), or the nearest base section's: a section that
    only changes a key's default keeps its option."""
    for base in model.__mro__:
        field = getattr(base, "model_fields", {}).get(name)
        if field is not None and getattr(field, attribute):
            return getattr(field, attribute)
    if attribute == "description":
        raise TypeError(f"{model.__name__}.{name} has no description, its option's help: give Field(description=...)")
    return None


def _option_type(field: FieldInfo) -> Any:
    """The type typer parses the option as: the field's, a list (or a tuple of any length) repeatable and None
    when not given, a union of a list and a table (given as names) a list."""
    annotation = _plain(field.annotation)
    args = [_plain(arg) for arg in typing.get_args(annotation)]
    origin = typing.get_origin(annotation)
    if origin is list or (origin is tuple and args[-1:] == [Ellipsis]) or list in map(typing.get_origin, args):
        return list[str] | None
    if origin is typing.Literal:
        return str
    if type(None) in args:  # X | None
        return next(arg for arg in args if arg is not type(None)) | None
    if origin is None and isinstance(annotation, type) and not issubclass(annotation, (*TYPER_TYPES, BaseModel)):
        return str  # given by name, parsed by the field's validator (a sandbox Kind)
    return annotation


def _plain(annotation: Any) -> Any:
    """``annotation`` without its ``Annotated`` metadata (a LoosePath is a Path)."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation


def _shown_default(field: FieldInfo, extra: dict) -> Any:
    """What --help shows as the default; options left at it set nothing, so the config's default applies."""
    default = field.default
    if isinstance(default, list) and extra.get("given_as") == "comma_list":
        return ",".join(default)
    repeated = isinstance(default, tuple) and _option_type(field) == list[str] | None
    if default is PydanticUndefined or isinstance(default, (dict, list)) or repeated:
        return None
    given_by_name = _option_type(field) is str and default is not None and not isinstance(default, str)
    return str(default) if given_by_name else default  # a sandbox Kind: its name

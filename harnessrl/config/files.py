"""A config as TOML: the base every section derives from (strict types, unknown keys refused, frozen), reading a
file with overrides on top, writing it back, and errors that name the file, the key and the fix."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import annotated_types
import tomli_w
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

from learner.settings import error_message

FROM_CLI = "the command line"
SHOW_HINT = "--show-config prints every key with its value"
# What a key's type is called in a message, by a word of its annotation (the first found).
KINDS = (
    ("Path", "a path (a string)"),
    ("dict", "a table of key = value"),
    ("list", 'a list, e.g. ["a", "b"]'),
    ("bool", "true or false"),
    ("float", "a number"),
    ("int", "an integer"),
    ("str", "a string in quotes"),
)
ERROR_ORDER = {"extra_forbidden": 0, "missing": 2}  # any other (a wrong type or value): 1
LoosePath = Annotated[Path, Field(strict=False)]  # TOML writes a path as a string


class Section(BaseModel):
    """A table of a config. Strict, so TOML's "4" is not taken for 4; frozen, as a run's settings are fixed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def to_toml(self) -> str:
        return to_toml(self)


Config = TypeVar("Config", bound=BaseModel)


def cli(
    flag: str | None = None,
    *,
    envvar: str | None = None,
    short: str | None = None,
    given_as: str | None = None,
    argument: bool | None = None,
):
    """How a key is given on the command line when not as ``--<its name>``, for ``Field(json_schema_extra=...)``:
    its flag, the environment variable that may give it, a one-letter flag, ``given_as`` ``comma_list``
    (a list given as "a,b") or ``pairs`` (a table given as repeated key=value), and ``argument``: a positional
    argument, required (``harnessrl ls runs``)."""
    given = {"flag": flag, "envvar": envvar, "short": short, "given_as": given_as, "argument": argument}
    return {name: value for name, value in given.items() if value is not None}


class ConfigError(ValueError):
    """A config that cannot be read; the message names where, the key and the fix."""


class MissingKey(ConfigError):
    """A required key that neither the file nor the command line gave."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


def load_config(model: type[Config], path: Path | None, overrides: Mapping[str, Any]) -> Config:
    """``model`` from the TOML file at ``path`` (None: defaults only), ``overrides`` (dotted keys, e.g.
    ``sandbox.kind``) over it."""
    values = read_toml(path) if path is not None else {}
    for key, value in overrides.items():
        _put(values, key.split("."), value)
    _with_sections(model, values)
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise _explained(first_error(exc), model, path, overrides) from None


def to_toml(config: BaseModel) -> str:
    """The whole config as TOML, read back as it is: an unset key as a comment (TOML has no null), and secrets
    (excluded fields) left out."""
    values = config.model_dump(mode="json")
    lines = _unset_comments(values) + tomli_w.dumps(_without_none(values)).splitlines()
    for table, value in _tables(values):
        comments = _unset_comments(value)
        if comments:
            at = lines.index(f"[{table}]") + 1
            lines[at:at] = comments
    return "\n".join(lines) + "\n"


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist: give a TOML file ({SHOW_HINT})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}: fix the line it names") from None


def defaults(model: type[Config]) -> Config:
    """``model``'s defaults, its sections' too, unvalidated (required keys left unset): the CLI shows these."""
    return model.model_construct(**{name: defaults(sub) for name, sub in _sections(model).items()})


def field_bounds(model: type[BaseModel], key: str) -> dict[str, float]:
    """The ``min`` and ``max`` the field at dotted ``key`` allows, as typer.Option takes them."""
    *sections, name = key.split(".")
    for section in sections:
        model = _sections(model)[section]
    found = {}
    for rule in model.model_fields[name].metadata:
        if isinstance(rule, annotated_types.Ge):
            found["min"] = rule.ge
        elif isinstance(rule, annotated_types.Le):
            found["max"] = rule.le
    return found


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_none(v) if isinstance(v, dict) else v for k, v in values.items() if v is not None}


def _tables(values: dict[str, Any], prefix: str = ""):
    """(dotted name, table) of every table under ``values``."""
    for key, value in values.items():
        if isinstance(value, dict):
            yield prefix + key, value
            yield from _tables(value, f"{prefix}{key}.")


def _unset_comments(values: dict[str, Any]) -> list[str]:
    return [f"# {key}: not set (its default applies)" for key, value in values.items() if value is None]


def _sections(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The fields of ``model`` that are tables of keys (a harnessrl Section, a learner's settings)."""
    fields = model.model_fields.items()
    return {n: f.annotation for n, f in fields if is_section(f.annotation)}


def is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _with_sections(model: type[BaseModel], values: dict[str, Any]) -> None:
    """Every absent section given as an empty table, so a missing key is named as ``section.key``."""
    for name, section in _sections(model).items():
        if isinstance(values.setdefault(name, {}), dict):
            _with_sections(section, values[name])


def _put(values: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        if not isinstance(values.get(key), dict):
            values[key] = {}
        values = values[key]
    values[keys[-1]] = value


def _explained(error: dict, model: type[BaseModel], path: Path | None, overrides: Mapping[str, Any]) -> ConfigError:
    """The first of pydantic's errors as a sentence naming where it came from, the key and the fix."""
    key = ".".join(str(part) for part in error["loc"])
    where = FROM_CLI if key in overrides or path is None else str(path)
    if error["type"] == "missing":
        return MissingKey(f"{where}: missing key {key}: give it ({SHOW_HINT})", key)
    return ConfigError(f"{where}: {explained(error, model)} ({SHOW_HINT})")


def first_error(exc: ValidationError) -> dict:
    """The error to tell first: an unknown key (a misspelt one may be why another is missing), a wrong value."""
    return min(exc.errors(), key=lambda error: ERROR_ORDER.get(error["type"], 1))


def explained(error: dict, model: type[BaseModel], prefix: str = "") -> str:
    """pydantic's ``error`` in ``model`` as a sentence naming the key (after ``prefix``, where ``model``'s values
    sit in a bigger config) and the fix."""
    key = ".".join(str(part) for part in error["loc"])
    if not key:  # a rule between keys (a model's validator): its message names them
        return error_message(error)
    owner, name = _owner(model, key)
    if error["type"] == "extra_forbidden":
        table = f"[{(prefix + key).rpartition('.')[0]}]" if "." in prefix + key else "the top level"
        return (
            f"unknown key {prefix}{key}: {table} takes {', '.join(owner.model_fields)}; {_moved(owner, name)}fix its "
            "spelling or remove it"
        )
    return f"{prefix}{key} = {error['input']!r}: {error_message(error)}; {_example(owner, name)}"


def _moved(model: type[BaseModel], name: str) -> str:
    """Where a key of that name lives in one of ``model``'s tables (``lr``, or the old flat ``lora_rank``), as a
    hint; empty when none has it."""
    for section, sub in _sections(model).items():
        for key in sub.model_fields:
            if name in (key, f"{section}_{key}"):
                return f"did you mean [{section}] {key}? "
    return ""


def _owner(model: type[BaseModel], key: str) -> tuple[type[BaseModel], str]:
    """The section holding dotted ``key`` and the key's last name (as far as the sections go)."""
    *sections, name = key.split(".")
    for section in sections:
        if section not in _sections(model):
            return model, section
        model = _sections(model)[section]
    return model, name


def _example(model: type[BaseModel], name: str) -> str:
    """How to write the key: its default as TOML, else its type."""
    field = model.model_fields.get(name)
    if field is None:
        return f"{name} is a table of keys"
    if field.default in (None, PydanticUndefined) or isinstance(field.default, (dict, list)):
        kind = next((said for word, said in KINDS if word in str(field.annotation)), str(field.annotation))
        return f"{name} takes {kind}"
    typed = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    written = TypeAdapter(typed).dump_python(field.default, mode="json")  # a sandbox Kind by its name
    return "write it like " + " ".join(tomli_w.dumps({name: written}).split())

"""The learner's settings as TOML: read (sections, or the old flat keys, each value checked against its
field's type), and written back (``harnessrl train --show-config``, quickstart's learner.toml).
The settings themselves, their checks and their overrides: learner/config.py."""

from __future__ import annotations

import dataclasses
import logging
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import tomli_w

from learner.config import (
    FLAT_KEYS,
    SECTIONS,
    TOP_LEVEL,
    ConfigError,
    LearnerConfig,
    section_hints,
    unknown_key,
    with_overrides,
)

logger = logging.getLogger(__name__)


def config_from_dict(values: dict[str, Any], source: str = "config") -> LearnerConfig:
    """A config from parsed TOML (sections, or the old flat keys); unknown keys and wrong types are
    errors naming the key."""
    top, sections, flat = {}, {name: {} for name in SECTIONS}, []
    for key, value in values.items():
        if key in SECTIONS and isinstance(value, dict):
            for name, item in value.items():
                sections[key][name] = _coerce(key, name, item, source)
        elif key in TOP_LEVEL:
            top[key] = _coerce(None, key, value, source)
        elif key in FLAT_KEYS:
            section, name = FLAT_KEYS[key]
            sections[section][name] = _coerce(section, name, value, source)
            flat.append(key)
        else:
            raise unknown_key(key, None, source)
    if flat:
        logger.warning(
            "%s uses the old flat keys; write them in sections: %s",
            source,
            ", ".join(f"{key} -> [{FLAT_KEYS[key][0]}] {FLAT_KEYS[key][1]}" for key in flat),
        )
    return _build(top, sections)


def _build(top: dict[str, Any], sections: dict[str, dict[str, Any]]) -> LearnerConfig:
    return LearnerConfig(**top, **{name: SECTIONS[name](**given) for name, given in sections.items()})


def _coerce(section: str | None, name: str, value: Any, source: str) -> Any:
    """TOML gives ints for floats written without a point and lists for tuples: accept both."""
    hints = section_hints(section)
    if name not in hints or (section is None and name in SECTIONS):
        raise unknown_key(name, section, source)
    hint = hints[name]
    key = f"{section}.{name}" if section else name
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    for option in options:
        ok, coerced = _as(option, value)
        if ok:
            return coerced
    example = getattr(SECTIONS[section](), name) if section else getattr(LearnerConfig(), name)
    raise ConfigError(
        f"{key} in {source} must be like {tomli_w.dumps({'x': _plain(example)})[4:].strip()}, got {value!r}"
    )


def _as(hint: Any, value: Any) -> tuple[bool, Any]:
    """(does ``value`` fit ``hint``, the value converted)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return value in typing.get_args(hint), value
    if origin is tuple:
        args = typing.get_args(hint)
        inner = args[0]
        fixed = args[1:] != (Ellipsis,)
        if not isinstance(value, list) or (fixed and len(value) != len(args)):
            return False, value
        items = [_as(inner, v) for v in value]
        return all(ok for ok, _ in items), tuple(v for _, v in items)
    if hint is bool:
        return isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    return isinstance(value, hint), value


def load_config(path: Path | None, **overrides: Any) -> LearnerConfig:
    """Read a TOML file (None: all defaults), then apply non-None overrides (from the CLI; see
    ``with_overrides`` for their names)."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return with_overrides(config_from_dict(values, str(path or "config")), **overrides)


def config_dict(config: LearnerConfig, secrets: bool = False) -> dict[str, Any]:
    """The config as TOML's tables take it (tuples as lists, None left out); the admin key emptied
    unless ``secrets``."""
    values = _plain(dataclasses.asdict(config))
    if not secrets:
        values["publish"]["admin_key"] = ""
    return values


def dump_toml(config: LearnerConfig, secrets: bool = False) -> str:
    """The config as sectioned TOML (`harnessrl train --show-config`; quickstart's learner.toml)."""
    return tomli_w.dumps(config_dict(config, secrets))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value

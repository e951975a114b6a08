"""The base of the learner's settings (learner/config.py): pydantic models, strict (TOML's "4" is no 4), frozen
(a run's settings are fixed) and refusing unknown keys (a typo never trains with a default). harnessrl reads and
writes them with the loader every job's config uses (harnessrl/config/files.py); each field's description is its
command-line option's help. Torch-free, so the CLI builds its options without loading torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """Settings the learner cannot use; the message names the key."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def updated(self, **changes: Any) -> Self:
        """These settings with ``changes`` over them (a section given as a dict of its keys: ``lora={"rank": 8}``),
        checked as a whole; ConfigError naming the key when they do not fit."""
        try:
            return type(self).model_validate(merged(self, changes))
        except ValidationError as exc:
            raise ConfigError(described(exc)) from None


def merged(settings: BaseModel, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``settings``' values with ``changes`` merged in, table by table (a section's other keys stay); a secret
    (a field left out of dumps) stays too."""
    values = {name: getattr(settings, name) for name in type(settings).model_fields}
    for key, value in changes.items():
        current = values.get(key)
        nested = isinstance(current, BaseModel) and isinstance(value, Mapping)
        values[key] = merged(current, value) if nested else value
    return values


def described(exc: ValidationError) -> str:
    """pydantic's errors as sentences, each naming its dotted key."""
    return "; ".join(_sentence(error) for error in exc.errors())


def error_message(error: Any) -> str:
    """pydantic's message for one error; a validator's own (a ValueError's) without pydantic's "Value error, "."""
    return str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]


def _sentence(error: Any) -> str:
    key = ".".join(str(part) for part in error["loc"])
    said = error_message(error) + ("" if error["type"] == "value_error" else f", got {error['input']!r}")
    return f"{key}: {said}" if key else said

"""A dialect's request body validated against its wire model: every dialect parses with
``parse_request``, so a bad body gets the same kind of 400 in each, naming the bad fields by their
path in the client's own body (``messages.1.content``), the first one as ``param``."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from gateway.errors import InvalidRequest

RequestT = TypeVar("RequestT", bound=BaseModel)
MAX_FIELDS = 5  # named in one message; the rest are usually the same mistake repeated


def parse_request(model: type[RequestT], raw: dict) -> RequestT:
    """``raw`` as ``model``; InvalidRequest (a 400 in the client's dialect) naming what is wrong."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        message, param = describe_errors(exc, raw)
        raise InvalidRequest(message, param=param) from None


def describe_errors(exc: ValidationError, raw: dict) -> tuple[str, str | None]:
    """One line naming each bad field by its path in the client's body, and the first as ``param``.

    Pydantic's locations also name the union branch it tried (``user``, ``str``, ``list[...]``);
    those are dropped, and a branch error is dropped when a deeper one explains the same field.
    """
    found: dict[str, list[str]] = {}
    for error in exc.errors():
        path = _body_path(raw, error["loc"], keep_last=error["type"] == "missing")
        found.setdefault(path, [])
        if error["msg"] not in found[path]:
            found[path].append(error["msg"])
    paths = [p for p in found if not any(other.startswith(f"{p}.") for other in found)][:MAX_FIELDS]
    message = "; ".join(f"{p}: {' or '.join(found[p])}" if p else " or ".join(found[p]) for p in paths)
    return message or "invalid request body", (paths[0] or None) if paths else None


def _body_path(raw, loc: tuple, keep_last: bool) -> str:
    parts, node = [], raw
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not (keep_last and position == len(loc) - 1):
            continue  # a union branch's name, not a place in the body
        parts.append(str(part))
    return ".".join(parts)

"""What the gateway did not serve of a request, recorded with the call under ``_gateway``.

A client's body is stored verbatim, so fields the gateway accepted but did not act on are already in
the record; this names them, so a new agent release that adds a field shows up in the record (and
in the compatibility tests) rather than being silently dropped:

- ``ignored_fields``: fields no wire model of the dialect knows (dotted paths, list positions as
  ``*``), accepted because they are optional and recorded because nothing used them;
- ``left_out_tools``: tools offered by the client that the model was not shown (hosted/server tools
  the gateway cannot run, deferred tools nobody loaded);
- dialect-specific facts (``context_edits``: what ``context_management`` removed from the history);
- ``omitted_fields``, ``omitted_more``: undeclared fields too large to keep, by name and size
  (``gateway.request.unknown_fields``).

The key is the gateway's: a client that sends its own ``_gateway`` has it replaced.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from pydantic import BaseModel

from gateway.request.unknown_fields import MAX_NAME_CHARS, omitted_fields

NOTES_KEY = "_gateway"
MAX_NAMED = 50  # of each list: a hostile client cannot make the record grow without bound


class LeftOut:
    """Marks a wire model the gateway leaves out whole (a hosted or server tool)."""


@dataclass
class RequestNotes:
    ignored_fields: list[str] = field(default_factory=list)
    left_out_tools: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        notes = {
            "ignored_fields": [_shown(name) for name in self.ignored_fields[:MAX_NAMED]],
            "left_out_tools": [_shown(name) for name in self.left_out_tools[:MAX_NAMED]],
            **self.extra,
        }
        return {key: value for key, value in notes.items() if value}


def ignored_fields(model: BaseModel, skip: frozenset[str] = frozenset({NOTES_KEY})) -> list[str]:
    """Dotted paths of the extra (unknown) fields anywhere in a parsed request, each path once.

    Models marked ``LeftOut`` (tools the gateway does not serve at all) are not looked into: their
    settings are the tool's, recorded with the tool's name as left out.
    """
    found: dict[str, None] = {}
    _walk(model, "", found, skip)
    return list(found)


def _walk(node, path: str, found: dict[str, None], skip: frozenset[str]) -> None:
    if isinstance(node, BaseModel):
        if isinstance(node, LeftOut):
            return
        for name in node.__pydantic_extra__ or ():
            if path or name not in skip:
                found.setdefault(path + name, None)
        for name, value in node.__dict__.items():  # the declared fields' values (extras live apart)
            if isinstance(value, (BaseModel, list)):
                _walk(value, f"{path}{name}.", found, skip)
    elif isinstance(node, list) and node and isinstance(node[0], (BaseModel, list)):  # of models or lists
        # (the first item decides: a list of plain values, token ids say, is not walked; a dict is not a model)
        inner = path + "*."
        for item in node:
            _walk(item, inner, found, skip)


def _shown(name: str) -> str:
    """A name as the notes write it: a client chose it, so it is cut to a length (the body holds it whole)."""
    return name if len(name) <= MAX_NAME_CHARS else f"{name[:MAX_NAME_CHARS]}... ({len(name)} characters)"


def recorded_request(raw: dict, notes: RequestNotes, undeclared: Collection[str] = ()) -> dict:
    """The client's body as stored: verbatim but for the ``undeclared`` top-level fields (pydantic's
    ``model_extra``) too large to keep, which the notes name with their sizes; plus the gateway's notes
    when there are any."""
    omitted = omitted_fields(raw, undeclared, NOTES_KEY) if undeclared else None
    if omitted is not None:
        notes.extra.update(omitted.notes())
    noted = notes.as_dict()
    if not noted and NOTES_KEY not in raw:
        return raw
    left_out = omitted.names if omitted is not None else ()
    body = {key: value for key, value in raw.items() if key != NOTES_KEY and key not in left_out}
    if noted:
        body[NOTES_KEY] = noted
    return body

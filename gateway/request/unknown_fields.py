"""What the store keeps of the request fields no wire model of the dialect declares: small ones as sent,
the others by name and size.

The wire models allow extra fields (vendor extensions such as ``top_k`` or ``chat_template_kwargs`` go on
to vLLM), and the store kept each one whole: five calls carrying a 24 MiB junk field grew the database by
121 MiB. Now a call's undeclared top-level fields are kept as sent while together they take at most
``KEPT_BYTES`` (names and values as JSON, in the body's order); the others are left out of the stored body
and named under ``_gateway.omitted_fields`` with their sizes (``{"junk": {"bytes": 25165826}}``). Past
``MAX_OMITTED_NAMED`` names, and for a name longer than ``MAX_NAME_CHARS``, they are counted together
(``_gateway.omitted_more``: ``{"fields": n, "bytes": m}``). Only the record changes: the engine is sent
what it was sent before. Fields nested in declared ones are kept; the rollout's byte budget bounds them
(``store.stored_bytes``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from store.json_text import json_bytes

KEPT_BYTES = 4096  # a call's undeclared fields kept as sent, together: a few extensions, never a flood
MAX_OMITTED_NAMED = 50  # omitted fields named one by one; the others are counted together
MAX_NAME_CHARS = 200  # a longer name is no extension's: counted, not written down


@dataclass
class Omitted:
    """The undeclared fields of a body left out of its record, and what the record says of them."""

    names: set[str] = field(default_factory=set)
    named: dict[str, dict] = field(default_factory=dict)  # name -> {"bytes": size of its value as JSON}
    more_fields: int = 0
    more_bytes: int = 0

    def notes(self) -> dict:
        """The ``_gateway`` entries naming them (none when nothing was left out)."""
        notes: dict = {"omitted_fields": self.named} if self.named else {}
        if self.more_fields:
            notes["omitted_more"] = {"fields": self.more_fields, "bytes": self.more_bytes}
        return notes


def omitted_fields(raw: dict, undeclared: Collection[str], skip: str) -> Omitted:
    """Which of ``raw``'s ``undeclared`` top-level fields (pydantic's ``model_extra``; ``skip``: the
    gateway's own notes key) its record leaves out: those past ``KEPT_BYTES``, in the body's order."""
    omitted, room = Omitted(), KEPT_BYTES
    for name in [key for key in raw if key in undeclared and key != skip]:
        size = len(json_bytes(raw[name]))
        cost = size + len(name.encode(errors="replace")) + 4  # '"name":' and ','
        if cost <= room:
            room -= cost
            continue
        omitted.names.add(name)
        if len(omitted.named) < MAX_OMITTED_NAMED and len(name) <= MAX_NAME_CHARS:
            omitted.named[name] = {"bytes": size}
        else:
            omitted.more_fields, omitted.more_bytes = omitted.more_fields + 1, omitted.more_bytes + size
    return omitted

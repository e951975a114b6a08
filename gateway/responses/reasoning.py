"""``reasoning.encrypted_content``: the gateway's opaque value for a reasoning item.

Clients that keep no server state (``store: false``, Codex CLI) ask for it with ``include:
["reasoning.encrypted_content"]`` and send it back on the reasoning item next turn, often without
the reasoning text. The value names the recorded call whose sampled tokens hold the reasoning and
carries its exact text, so the reasoning is rendered again as it was sampled: in tito capture mode the
assistant turn it belongs to is then spliced with that call's exact ids.

It is not encrypted: an agent that edits it changes only its own prompt, as editing any earlier turn
does, and the gateway never looks anything up by the call id it names. A value that is not ours
(from another server) or is malformed is ignored: the item's summary is used instead.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

PREFIX = "harnessrl.r1."
INCLUDE = "reasoning.encrypted_content"


@dataclass(frozen=True)
class ReasoningRef:
    call_id: int  # the recorded call that sampled the reasoning
    text: str


def encode(call_id: int, text: str) -> str:
    payload = json.dumps({"call": call_id, "text": text}, ensure_ascii=False, separators=(",", ":"))
    return PREFIX + base64.urlsafe_b64encode(payload.encode()).decode()


def decode(value: str | None) -> ReasoningRef | None:
    if not value or not value.startswith(PREFIX):
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(value[len(PREFIX) :].encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    call, text = payload.get("call"), payload.get("text")
    if not isinstance(call, int) or isinstance(call, bool) or not isinstance(text, str):
        return None
    return ReasoningRef(call, text)

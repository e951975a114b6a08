"""Chat requests validated once per new message, not once per resent history.

An agent resends its whole conversation every turn; validating all of it again costs time linear in
the history (about 0.6 ms a turn at 32k tokens on this machine, the largest such part of a turn). The
chat route validates to refuse a bad body, and forwards and stores the raw body, never the validated
model's messages. So per rollout the messages of its last valid request are kept, and a request whose
messages extend them (equal, compared in C: far cheaper than validating) has only its new messages
validated, with the rest of its body. Messages are validated one by one (no rule relates two of
them), so the result is the same; a request that fails is validated whole again, so the error names
the field's place in the client's body. The body's nesting depth (``gateway.request.json_body``) is checked
here as well, on the same new part, for the chat route. The prefix is kept per rollout, whose token only its own
agent holds: an agent can only lean on messages it sent itself and that passed then.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from gateway.request.json_body import json_depth_exceeds, too_deep
from gateway.request.validation import parse_request

RequestT = TypeVar("RequestT", bound=BaseModel)
ROLLOUTS_CACHED = 1024  # rollouts whose last valid messages are kept (references: no copy is made)


class ValidatedHistory:
    def __init__(self, field: str = "messages", rollouts: int = ROLLOUTS_CACHED):
        self.field, self.rollouts = field, rollouts
        self._known: OrderedDict[int, list] = OrderedDict()

    def parse(self, model: type[RequestT], raw: dict, rollout_id: int | None) -> RequestT:
        """``raw`` as ``model`` (a check: its ``field`` holds only the items that were validated now)."""
        items = raw.get(self.field)
        known = self._known.get(rollout_id) if rollout_id is not None else None
        extends = (
            known is not None and isinstance(items, list) and len(items) > len(known) and items[: len(known)] == known
        )
        new = {**raw, self.field: items[len(known) :]} if extends else None  # the body less what is known
        # Nesting too, checked only where it is new: the known messages passed in an earlier body.
        if json_depth_exceeds(raw if new is None else new):
            raise too_deep()
        request = None
        if new is not None:
            try:
                request = model.model_validate(new)
            except ValidationError:
                request = None  # validated whole below, for the error's place in the body
        if request is None:
            request = parse_request(model, raw)
        if rollout_id is not None and isinstance(items, list):
            self._remember(rollout_id, items)
        return request

    def _remember(self, rollout_id: int, items: list) -> None:
        self._known[rollout_id] = items
        self._known.move_to_end(rollout_id)
        while len(self._known) > self.rollouts:
            self._known.popitem(last=False)

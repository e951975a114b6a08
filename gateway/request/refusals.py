"""Main-loop calls of a rollout that the engine refused, so a rollout that never got an answer says why.

An agent whose first prompt is longer than the engine's context never gets one answer: it gives up,
and the rollout would end as if the agent had done nothing (reward 0), the 400s visible only in
/metrics. The gateway notes, per rollout, the main-loop calls the engine (or tito's own context check)
refused with a 400 and the main-loop calls it answered; the rollout view carries them, and the runner
ends a rollout with refusals and no answer as failed with the cause (rollouts/runner.py), out of
training. Side calls (titles, summaries) count for neither: OpenCode's short title call is answered
while its main loop's first prompt does not fit. Kept in memory per gateway process, like the engine
clock; a rollout's entry goes when the rollout ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.errors import GatewayError
from gateway.request.tagging import side_call_tags
from store.records import RolloutIdentity

# vLLM's words for a prompt longer than its context (vllm/renderers/params.py, v1/engine/input_processor.py)
# and tito's (gateway/tito/serving.py): (context, prompt) or (prompt, context) token counts.
_OVERFLOWS = (
    (
        re.compile(
            r"context length is (\d+) tokens\. However, your (?:prompt contains|request has) (?:at least )?(\d+) input"
        ),
        1,
    ),
    (re.compile(r"prompt \(length (\d+)\).*? longer than the maximum model length of (\d+)"), 0),
    (re.compile(r"the prompt has (\d+) tokens; the engine's maximum context length is (\d+)"), 0),
)
CAUSE_CHARS = 300  # of an engine message that is not a context overflow


def refusal_cause(message: str, first: bool) -> str:
    """The refusal in a few words: "first prompt 13,155 tokens > the engine's 8,192" for a context
    overflow (``first``: no main-loop call of the rollout was answered before it), else the message."""
    for pattern, prompt_at in _OVERFLOWS:
        found = pattern.search(message)
        if found:
            prompt, context = int(found.group(1 + prompt_at)), int(found.group(2 - prompt_at))
            return f"{'first ' if first else ''}prompt {prompt:,} tokens > the engine's {context:,}"
    return message[:CAUSE_CHARS]


@dataclass
class _Calls:
    answered: int = 0
    refused: int = 0
    last_refusal: str | None = None


class EngineRefusals:
    def __init__(self) -> None:
        self._rollouts: dict[int, _Calls] = {}

    @contextmanager
    def noting(self, identity: RolloutIdentity, chat_body: dict | None) -> Iterator[None]:
        """Around a call's engine request: a 400 refusal of a main-loop call is noted, then raised on."""
        try:
            yield
        except GatewayError as exc:
            if exc.status_code == 400 and not _side_call(identity, chat_body):
                calls = self._rollouts.setdefault(identity.rollout_id, _Calls())
                calls.refused += 1
                calls.last_refusal = refusal_cause(str(exc), first=not calls.answered)
            raise

    def answered(self, rollout_id: int, tags: list[str]) -> None:
        if not tags:
            self._rollouts.setdefault(rollout_id, _Calls()).answered += 1

    def of(self, rollout_id: int) -> tuple[int, int, str | None]:
        """(main-loop calls answered, refused, the last refusal's cause) of the rollout."""
        calls = self._rollouts.get(rollout_id, _Calls())
        return calls.answered, calls.refused, calls.last_refusal

    def forget(self, rollout_id: int) -> None:
        self._rollouts.pop(rollout_id, None)


def _side_call(identity: RolloutIdentity, chat_body: dict | None) -> bool:
    if chat_body is None:  # a plain completion: no messages to tell a side call by
        return False
    messages, tools = chat_body.get("messages") or [], bool(chat_body.get("tools"))
    return bool(side_call_tags(messages, tools, identity.side_patterns))

"""Token id arrays made once per new token: a prompt that extends an earlier call's sequence reuses its array.

An agent resends its whole history every turn, so turn k+1's prompt ids are turn k's prompt + output
ids and a few new turns. Converting a list of Python ints to the packed array the store and the call
graph use costs ~35 ns a token (a millisecond at 32k tokens, every turn); comparing it with the
earlier call's list (C, mostly identity checks) and converting only the new tail costs a fraction of
that. Per rollout the last few sequences are kept, as the list and as the array.

The engine's answer carries the prompt ids again as JSON, ~200 kB at 32k tokens. ``loads_answer``
reads an answer with a hint (``prompt_hint``, set by the pipeline for the call): the rollout's last
prompt + output as the engine writes them. When the answer's prompt ids begin with exactly those
bytes (compared in C), only the new tail is parsed and the list reuses the known one's int objects,
so the comparison above is one of identities; any other answer is parsed whole, as before. Equal bytes
are equal ids, so the result is the same either way.
"""

from __future__ import annotations

from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import orjson

IDS = np.dtype("<i4")
SEQUENCES_PER_ROLLOUT = 4  # main loop, subagents, side calls
ROLLOUTS_CACHED = 1024
PROMPT_IDS_KEY = b'"prompt_token_ids":['  # as vLLM writes it (compact JSON); a quote in a string is escaped


@dataclass
class PromptHint:
    """What one call's prompt ids likely begin with; ``text`` is filled in when its answer is read."""

    known: list[int] | None = None  # the rollout's last prompt + output ids
    known_text: bytes | None = None  # the same as the engine writes them: b"1,2,3" (no brackets)
    text: bytes | None = None  # this call's prompt ids as the engine wrote them

    def ids(self, text: bytes) -> list[int]:
        """The prompt ids written as ``text`` (b"1,2,3"), the known part reused."""
        known, head = self.known, self.known_text
        if known is not None and head and text.startswith(head) and text[len(head) : len(head) + 1] in (b"", b","):
            tail = text[len(head) + 1 :]
            ids = known + orjson.loads(b"[" + tail + b"]") if tail else list(known)
        else:
            ids = orjson.loads(b"[" + text + b"]")
        self.text = text  # only once read: a text that does not parse never becomes a hint
        return ids


# Set by the pipeline around its engine call (the engine client reads answers with it).
prompt_hint: ContextVar[PromptHint | None] = ContextVar("prompt_hint", default=None)


def loads_answer(raw: bytes) -> dict:
    """An engine answer (or stream chunk) as JSON; its prompt ids read with the call's hint, if any."""
    hint = prompt_hint.get()
    start = raw.find(PROMPT_IDS_KEY) if hint is not None else -1
    if start < 0 or raw.rfind(PROMPT_IDS_KEY) != start:
        return orjson.loads(raw)
    hint.text = None  # an answer read whole below leaves no text behind (a resent call's second answer)
    begin = start + len(PROMPT_IDS_KEY)
    end = raw.find(b"]", begin)
    if end < 0:
        return orjson.loads(raw)
    try:
        answer = orjson.loads(raw[: begin - 1] + b"null" + raw[end + 1 :])
        holder = answer if "prompt_token_ids" in answer else (answer.get("choices") or [{}])[0]
        if holder.get("prompt_token_ids", 0) is not None:
            return orjson.loads(raw)  # not where the ids belong: read it whole
        holder["prompt_token_ids"] = hint.ids(raw[begin:end])
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return orjson.loads(raw)  # anything unusual: the plain reading (which raises if it must)
    return answer


class PrefixArrays:
    def __init__(self) -> None:
        # per rollout, newest first: (ids, their array, their JSON text as the engine writes it or None)
        self._rollouts: OrderedDict[int, list[tuple[list[int], np.ndarray, bytes | None]]] = OrderedDict()

    def array(self, rollout_id: int, ids: list[int]) -> np.ndarray:
        """``ids`` as a little-endian int32 array; a known sequence they extend is not converted again."""
        for known, packed, _ in self._rollouts.get(rollout_id, ()):  # the newest (the likely parent) first
            if known and len(known) <= len(ids) and ids[: len(known)] == known:
                return np.concatenate((packed, np.asarray(ids[len(known) :], dtype=IDS)))
        return np.asarray(ids, dtype=IDS)

    def hint(self, rollout_id: int) -> PromptHint:
        """A hint for the rollout's next call: its newest sequence."""
        sequences = self._rollouts.get(rollout_id)
        if not sequences:
            return PromptHint()
        known, _, known_text = sequences[0]
        return PromptHint(known, known_text)

    def add(
        self,
        rollout_id: int,
        prompt: list[int],
        prompt_array: np.ndarray,
        output: list[int],
        output_array: np.ndarray,
        prompt_text: bytes | None = None,
    ) -> None:
        """A recorded call's prompt + output: what the rollout's next prompt likely extends.
        ``prompt_text``: the prompt ids as the engine wrote them (``PromptHint.text``), if known."""
        sequences = self._rollouts.setdefault(rollout_id, [])
        self._rollouts.move_to_end(rollout_id)
        text = None
        if prompt_text is not None:
            text = prompt_text + b"," + orjson.dumps(output)[1:-1] if output and prompt_text else prompt_text
        sequences.insert(0, ([*prompt, *output], np.concatenate((prompt_array, output_array)), text))
        del sequences[SEQUENCES_PER_ROLLOUT:]
        while len(self._rollouts) > ROLLOUTS_CACHED:
            self._rollouts.popitem(last=False)

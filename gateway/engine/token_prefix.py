"""Token id arrays made once per new token: a prompt that extends an earlier call's sequence reuses its array.

An agent resends its whole history every turn, so turn k+1's prompt ids are turn k's prompt + output
ids and a few new turns. Converting a list of Python ints to the packed array the store and the call
graph use costs ~35 ns a token (a millisecond at 32k tokens, every turn), and so does building the
list. Per rollout the last few sequences are kept as arrays, with their JSON text as the engine wrote
them: a view of the answer that carried the prompt (no copy; it keeps that answer's ~200 kB at 32k
tokens alive) and the output's text.

The engine's answer carries the prompt ids again as JSON, ~200 kB at 32k tokens. ``loads_answer``
reads an answer with a hint (``prompt_hint``, set by the pipeline for the call): the rollout's last
prompt + output, as an array and as the engine writes them. When the answer's prompt ids begin with
exactly those bytes (compared in place, in C), or with the last prompt's alone (the same turn sent
again), only the new tail is scanned and parsed, and the prompt
ids come back as an int32 array: the known array and the tail's, no Python int made for the known
part, no copy of the answer's text made. Any other answer
is parsed whole, its ids a list, as before. Equal bytes are equal ids, so the ids are the same either
way; only their container differs (an array is what the pipeline records anyway).

A capture mode that renders its own prompt (tito) hands the pipeline an array too
(``gateway.tito.renderer``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np
import orjson

from store.arrays import IDS

SEQUENCES_PER_ROLLOUT = 4  # main loop, subagents, side calls
ROLLOUTS_CACHED = 1024
PROMPT_IDS_KEY = b'"prompt_token_ids":['  # as vLLM writes it (compact JSON); a quote in a string is escaped

TokenIds = Sequence[int] | np.ndarray  # a list from plain JSON, an int32 array when read with a hint


@dataclass
class PromptHint:
    """What one call's prompt ids likely begin with; ``text`` is filled in when its answer is read."""

    known: np.ndarray | None = None  # int32: the rollout's last prompt + output ids
    # The same as the engine writes them (b"1,2,3", no brackets), in parts that join to it: the last
    # prompt's text as a view of its answer, then b"," and the output's (no copy of the whole made).
    known_text: tuple[bytes | memoryview, ...] = ()
    text: memoryview | None = None  # this call's prompt ids as the engine wrote them (a view of its answer)

    # How many of ``known``'s ids each part of ``known_text`` ends with (empty: only the whole is known
    # as a count): an answer that repeats the last prompt without its output (a call sent again, a
    # fresh sample of the same turn) still reads its prompt from the array.
    known_counts: tuple[int, ...] = ()

    def read(self, raw: bytes, begin: int) -> tuple[TokenIds, int] | None:
        """The prompt ids written in ``raw`` from ``begin`` (after the opening bracket) and the position
        of their closing bracket: an int32 array when they extend (a prefix of) the known ones, only
        the tail parsed. ``loads_answer`` sets ``text`` once the whole answer has been read."""
        known_end, count = self._known_end(raw, begin)
        end = raw.find(b"]", begin if known_end is None else known_end)
        if end < 0:
            return None
        if known_end is None:
            ids = orjson.loads(memoryview(raw)[begin - 1 : end + 1])
        elif known_end < end:
            tail = np.array(orjson.loads(b"[" + raw[known_end + 1 : end + 1]), IDS)
            ids = np.concatenate((self.known[:count], tail))
        else:
            ids = self.known if count == len(self.known) else self.known[:count]
        return ids, end

    def _known_end(self, raw: bytes, begin: int) -> tuple[int | None, int]:
        """Where the longest known prefix ends in ``raw`` when the ids from ``begin`` start with exactly
        it, and how many ids it holds: whole parts of ``known_text``, ending where a number does."""
        if self.known is None or not self.known_text:
            return None, 0
        counts = self.known_counts or (*[None] * (len(self.known_text) - 1), len(self.known))
        position, found = begin, (None, 0)
        for part, count in zip(self.known_text, counts):
            if not raw.startswith(part, position):
                break
            position += len(part)
            if count is not None and raw[position : position + 1] in (b",", b"]"):  # not inside a number
                found = (position, count)
        return found


# Set by the pipeline around its engine call (the engine client reads answers with it).
prompt_hint: ContextVar[PromptHint | None] = ContextVar("prompt_hint", default=None)


def loads_answer(raw: bytes) -> dict:
    """An engine answer (or stream chunk) as JSON; its prompt ids read with the call's hint, if any.

    Only what is around the prompt ids is scanned and parsed, and their tail past the known ones;
    the known part is compared (``PromptHint.read``). The key is looked for again after the ids only:
    before them ``find`` found none, and inside them any non-number fails the tail's parse.
    """
    hint = prompt_hint.get()
    start = raw.find(PROMPT_IDS_KEY) if hint is not None else -1
    if start < 0:
        return orjson.loads(raw)
    hint.text = None  # an answer read whole below leaves no text behind (a resent call's second answer)
    begin = start + len(PROMPT_IDS_KEY)
    try:
        read = hint.read(raw, begin)
        if read is None or raw.find(PROMPT_IDS_KEY, read[1]) >= 0:
            return orjson.loads(raw)  # no end, or the key twice: read whole
        ids, end = read
        answer = orjson.loads(raw[: begin - 1] + b"null" + raw[end + 1 :])
        holder = answer if "prompt_token_ids" in answer else (answer.get("choices") or [{}])[0]
        if holder.get("prompt_token_ids", 0) is not None:
            return orjson.loads(raw)  # not where the ids belong: read it whole
    except (orjson.JSONDecodeError, AttributeError, TypeError, OverflowError):
        return orjson.loads(raw)  # anything unusual: the plain reading (which raises if it must)
    holder["prompt_token_ids"] = ids
    hint.text = memoryview(raw)[begin:end]  # only an answer read this way becomes the next hint
    return answer


def token_count(ids: TokenIds | None) -> int:
    """How many ids an answer's ``prompt_token_ids`` holds (an array has no truth value)."""
    return 0 if ids is None else len(ids)


@dataclass(frozen=True)
class _Sequence:
    array: np.ndarray  # int32, read-only: prompt + output
    text: tuple[bytes | memoryview, ...]  # the same as the engine wrote them, in parts (PromptHint.known_text)
    counts: tuple[int, ...]  # ids up to the end of each part (PromptHint.known_counts)


def as_array(ids: TokenIds) -> np.ndarray:
    """``ids`` as a little-endian int32 array (not copied when they are one)."""
    return ids.astype(IDS, copy=False) if isinstance(ids, np.ndarray) else np.asarray(ids, dtype=IDS)


class PrefixArrays:
    def __init__(self) -> None:
        self._rollouts: OrderedDict[int, list[_Sequence]] = OrderedDict()  # per rollout, newest first

    def hint(self, rollout_id: int) -> PromptHint:
        """A hint for the rollout's next call: its newest sequence."""
        sequences = self._rollouts.get(rollout_id)
        if not sequences:
            return PromptHint()
        newest = sequences[0]
        return PromptHint(newest.array, newest.text, known_counts=newest.counts)

    def add(
        self,
        rollout_id: int,
        prompt_array: np.ndarray,
        output_array: np.ndarray,
        prompt_text: bytes | memoryview | None = None,
    ) -> np.ndarray:
        """A recorded call's prompt + output: what the rollout's next prompt likely extends; returns
        them as one read-only array. ``prompt_text``: the prompt ids as the engine wrote them
        (``PromptHint.text``), if known."""
        text: tuple[bytes | memoryview, ...] = (prompt_text,) if prompt_text else ()
        counts: tuple[int, ...] = (len(prompt_array),) if prompt_text else ()
        if text and len(output_array):
            text += (b"," + orjson.dumps(output_array.tolist())[1:-1],)
            counts += (len(prompt_array) + len(output_array),)
        array = np.concatenate((prompt_array, output_array))
        array.flags.writeable = False  # shared: the next call's ids may be this very array
        sequences = self._rollouts.setdefault(rollout_id, [])
        self._rollouts.move_to_end(rollout_id)
        sequences.insert(0, _Sequence(array, text, counts))
        del sequences[SEQUENCES_PER_ROLLOUT:]
        while len(self._rollouts) > ROLLOUTS_CACHED:
            self._rollouts.popitem(last=False)
        return array

"""Token id arrays made once per new token: a prompt that extends an earlier call's sequence reuses its array.

An agent resends its whole history every turn, so turn k+1's prompt ids are turn k's prompt + output
ids and a few new turns. Converting a list of Python ints to the packed array the store and the call
graph use costs ~35 ns a token (a millisecond at 32k tokens, every turn); comparing it with the
earlier call's list (C, mostly identity checks) and converting only the new tail costs a fraction of
that. Per rollout the last few sequences are kept, as the list and as the array.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

IDS = np.dtype("<i4")
SEQUENCES_PER_ROLLOUT = 4  # main loop, subagents, side calls
ROLLOUTS_CACHED = 1024


class PrefixArrays:
    def __init__(self) -> None:
        self._rollouts: OrderedDict[int, list[tuple[list[int], np.ndarray]]] = OrderedDict()

    def array(self, rollout_id: int, ids: list[int]) -> np.ndarray:
        """``ids`` as a little-endian int32 array; a known sequence they extend is not converted again."""
        for known, packed in self._rollouts.get(rollout_id, ()):  # the newest (the likely parent) first
            if known and len(known) <= len(ids) and ids[: len(known)] == known:
                return np.concatenate((packed, np.asarray(ids[len(known) :], dtype=IDS)))
        return np.asarray(ids, dtype=IDS)

    def add(
        self, rollout_id: int, prompt: list[int], prompt_array: np.ndarray, output: list[int], output_array: np.ndarray
    ) -> None:
        """A recorded call's prompt + output: what the rollout's next prompt likely extends."""
        sequences = self._rollouts.setdefault(rollout_id, [])
        self._rollouts.move_to_end(rollout_id)
        sequences.insert(0, ([*prompt, *output], np.concatenate((prompt_array, output_array))))
        del sequences[SEQUENCES_PER_ROLLOUT:]
        while len(self._rollouts) > ROLLOUTS_CACHED:
            self._rollouts.popitem(last=False)

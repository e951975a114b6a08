"""A prompt extending a recorded call's prompt + output reuses its array; any prompt reads back exact."""

from __future__ import annotations

import numpy as np

from gateway.token_prefix import PrefixArrays


def test_a_prompt_reads_back_exactly_whether_or_not_it_extends_a_known_sequence():
    prefixes = PrefixArrays()
    prompt, output = list(range(100, 140)), [7, 8, 9]
    prefixes.add(1, prompt, np.asarray(prompt, "<i4"), output, np.asarray(output, "<i4"))
    extended = prompt + output + [5, 6]
    forked = prompt[:10] + [99] + prompt[11:] + output + [5]  # a rewritten history: no longer a prefix
    for ids in (extended, forked, prompt[:5], [], prompt + output):
        array = prefixes.array(1, ids)
        assert array.dtype == np.dtype("<i4") and array.tolist() == ids
    assert prefixes.array(2, extended).tolist() == extended  # another rollout's sequences are not used


def test_the_newest_sequence_is_the_one_extended():
    prefixes = PrefixArrays()
    first, second = [1, 2, 3], [1, 2, 3, 4, 5, 6]
    for ids in (first, second):
        prefixes.add(1, ids, np.asarray(ids, "<i4"), [0], np.asarray([0], "<i4"))
    assert prefixes.array(1, [*second, 0, 11]).tolist() == [*second, 0, 11]
    assert prefixes.array(1, [*first, 0, 12]).tolist() == [*first, 0, 12]

"""Training samples from the call graph: masks, logprobs, versions, side calls and forks."""

from __future__ import annotations

import numpy as np
import pytest

from store.samples import CallNode, build_samples


def call(call_id, parent, prompt, output, version=0, tags=()) -> CallNode:
    logprobs = -np.arange(1, len(output) + 1, dtype=np.float32) / 10
    return CallNode(
        call_id, parent, np.array(prompt, np.int32), np.array(output, np.int32), logprobs, version, tuple(tags)
    )


def test_two_turns_make_one_sample_masking_prompt_and_tool_output():
    first = call(1, None, [10, 11], [20, 21], version=0)
    second = call(2, 1, [10, 11, 20, 21, 30, 31], [40], version=1)  # 30, 31: the tool's output
    [sample] = build_samples([first, second])
    assert sample.input_ids.tolist() == [10, 11, 20, 21, 30, 31, 40]
    assert sample.loss_mask.tolist() == [0, 0, 1, 1, 0, 0, 1]
    assert sample.old_logprobs.tolist() == pytest.approx([0, 0, -0.1, -0.2, 0, 0, -0.1])
    assert sample.policy_versions.tolist() == [-1, -1, 0, 0, -1, -1, 1]
    assert sample.call_ids == (1, 2) and sample.num_turns == 2


def test_side_calls_are_left_out_unless_asked_for():
    main = call(1, None, [1], [2])
    title = call(2, None, [7], [8], tags=["title"])
    assert [s.call_ids for s in build_samples([main, title])] == [(1,)]
    assert [s.call_ids for s in build_samples([main, title], include_side=True)] == [(1,), (2,)]


def test_siblings_and_forks_each_make_their_own_path():
    root = call(1, None, [1], [2])
    retry_a, retry_b = call(2, 1, [1, 2, 3], [4]), call(3, 1, [1, 2, 3], [5])
    fork = call(4, None, [1, 9], [6])
    assert [s.call_ids for s in build_samples([root, retry_a, retry_b, fork])] == [(1, 2), (1, 3), (4,)]


def test_an_inconsistent_graph_is_refused():
    with pytest.raises(ValueError, match="not a prefix"):
        build_samples([call(1, None, [1], [2]), call(2, 1, [1, 3, 4], [5])])

"""The call graph: parents, siblings, forks with drift, and rewrites as new roots."""

from __future__ import annotations

from gateway.recording.callgraph import GraphNode, common_prefix_len, link
from store.arrays import pack_ids
from store.records import FALSE_FORK_TOKENS


def node(call_id: int, prompt: list[int], output: list[int]) -> GraphNode:
    return GraphNode(call_id, len(prompt), pack_ids(prompt + output))


def test_common_prefix_len_counts_tokens():
    assert common_prefix_len(pack_ids([1, 2, 3]), pack_ids([1, 2, 4])) == 2
    assert common_prefix_len(pack_ids([1, 2]), pack_ids([1, 2, 3])) == 2
    assert common_prefix_len(pack_ids([]), pack_ids([1])) == 0


def test_parent_is_the_longest_earlier_call_that_prefixes_the_prompt():
    first = node(1, [1, 2], [3])
    second = node(2, [1, 2, 3, 4], [5])
    assert link(pack_ids([1, 2, 3, 4, 5, 6]), [first, second]).parent_id == 2
    assert link(pack_ids([1, 2, 3, 9]), [first, second]).parent_id == 1


def test_retries_of_the_same_turn_become_siblings():
    first = node(1, [1, 2], [3])
    retry_a, retry_b = node(2, [1, 2, 3, 4], [5]), node(3, [1, 2, 3, 4], [6])
    assert link(pack_ids([1, 2, 3, 4]), [first]).parent_id == 1
    assert {
        link(pack_ids([1, 2, 3, 4, 5, 7]), [first, retry_a, retry_b]).parent_id,
        link(pack_ids([1, 2, 3, 4, 6, 7]), [first, retry_a, retry_b]).parent_id,
    } == {2, 3}


def test_divergence_inside_sampled_tokens_is_a_fork_with_its_drift():
    sampled = node(1, [1, 2], [3, 4, 5, 6])
    result = link(pack_ids([1, 2, 3, 9, 9, 7]), [sampled])
    assert result.parent_id is None and result.fork_of == 1 and result.drift_tokens == 3


def test_an_answer_re_serialized_from_its_first_token_is_a_fork_of_all_its_sampled_tokens():
    """Measured with pi on SmolLM2: the model wrote ``>`` before a tool call; pi sent the turn back in
    another serialization, which left the sampled tokens at the very first one."""
    sampled = node(1, [1, 2], [3, 4, 5])
    result = link(pack_ids([1, 2, 7, 8, 9]), [sampled])
    assert (result.parent_id, result.fork_of, result.drift_tokens, result.kind) == (None, 1, 3, "fork")


def test_a_history_rewrite_is_a_new_root_not_a_fork():
    sampled = node(1, [1, 2, 3, 4], [5, 6])
    result = link(pack_ids([1, 2, 8]), [sampled])
    assert (result.parent_id, result.fork_of, result.drift_tokens) == (None, None, 0)


def test_a_later_root_continues_an_earlier_call_only_when_their_first_64_tokens_agree():
    earlier = node(1, list(range(100, 100 + FALSE_FORK_TOKENS + 8)), [1])
    same_lead = [*range(100, 100 + FALSE_FORK_TOKENS), 7, 7]  # rewritten after the threshold
    off_by_one = [*range(100, 100 + FALSE_FORK_TOKENS - 1), 7, 7, 7]  # rewritten at its last token
    assert link(pack_ids(same_lead), [earlier]).kind == "false_fork"
    assert link(pack_ids(off_by_one), [earlier]).kind == "new_root"
    assert link(pack_ids(same_lead[: FALSE_FORK_TOKENS - 1]), [earlier]).kind == "new_root"  # too short to say

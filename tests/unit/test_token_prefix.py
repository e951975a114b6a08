"""A prompt extending a recorded call's prompt + output reuses its array; any prompt reads back exact."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.engine.client import encoded
from gateway.engine.token_prefix import PrefixArrays, PromptHint, as_array, loads_answer, prompt_hint, token_count


def test_ids_become_an_int32_array_and_an_array_is_not_copied():
    for ids in ([5, 6, 7], [], np.asarray([5, 6, 7], "<i8")):
        array = as_array(ids)
        assert array.dtype == np.dtype("<i4") and array.tolist() == list(ids)
    known = np.asarray([1, 2, 3], "<i4")
    assert as_array(known) is known


def test_the_newest_sequence_hints_the_next_call_and_other_rollouts_get_none():
    prefixes = PrefixArrays()
    for prompt in ([1, 2, 3], [1, 2, 3, 0, 4, 5]):
        prefixes.add(1, np.asarray(prompt, "<i4"), np.asarray([0], "<i4"))
    assert prefixes.hint(1).known.tolist() == [1, 2, 3, 0, 4, 5, 0]
    assert prefixes.hint(2) == PromptHint()


def chat_answer(prompt_ids: list[int], content: str = "ok") -> bytes:
    """An answer as vLLM writes it (compact JSON), prompt ids at the top level."""
    return orjson.dumps(
        {"id": "c", "choices": [{"message": {"content": content}, "token_ids": [7, 8]}], "prompt_token_ids": prompt_ids}
    )


def completion_answer(prompt_ids: list[int]) -> bytes:
    return orjson.dumps({"id": "c", "choices": [{"text": "x", "token_ids": [7], "prompt_token_ids": prompt_ids}]})


def hinted(raw: bytes, hint: PromptHint) -> dict:
    token = prompt_hint.set(hint)
    try:
        return loads_answer(raw)
    finally:
        prompt_hint.reset(token)


def test_an_answer_extending_the_hint_reads_only_its_tail_onto_the_known_array():
    known = np.asarray([300, 301, 302, 303], "<i4")
    hint = PromptHint(known, (b"300,301", b",302,303"))
    for raw, where in (
        (chat_answer([300, 301, 302, 303, 7, 8]), None),
        (completion_answer([300, 301, 302, 303, 9]), 0),
        (chat_answer([300, 301, 302, 303]), None),  # nothing new: the known array itself
    ):
        answer = hinted(raw, hint)
        plain = orjson.loads(raw)
        holder, plain_holder = (answer, plain) if where is None else (answer["choices"][0], plain["choices"][0])
        ids = holder.pop("prompt_token_ids")
        assert isinstance(ids, np.ndarray) and ids.dtype == np.dtype("<i4")
        assert ids.tolist() == plain_holder.pop("prompt_token_ids") and answer == plain
        assert bytes(hint.text) == orjson.dumps(ids.tolist())[1:-1]


def test_ids_too_large_for_the_array_read_as_plain_json():
    hint = PromptHint(np.asarray([1, 2], "<i4"), (b"1,2",))
    raw = chat_answer([1, 2, 2**40])
    assert hinted(raw, hint) == orjson.loads(raw)


@pytest.mark.parametrize(
    "known_text, prompt",
    [
        (b"1,2", [1, 23, 4]),  # the known text ends inside a number: not a prefix of the ids
        (b"5,6", [1, 2, 3]),  # a rewritten history
        (b"1,2,3,4", [1, 2, 3]),  # shorter than what is known
    ],
)
def test_an_answer_not_extending_the_hint_reads_as_plain_json(known_text, prompt):
    hint = PromptHint(np.asarray(orjson.loads(b"[" + known_text + b"]"), "<i4"), (known_text,))
    raw = chat_answer(prompt)
    assert hinted(raw, hint) == orjson.loads(raw)


def test_the_prompt_ids_key_inside_generated_text_cannot_pass_for_the_ids():
    """The model writes text; JSON escapes its quotes, so no content forges the key or a second one."""
    hint = PromptHint(np.asarray([1, 2], "<i4"), (b"1,2",))
    sneaky = 'x"prompt_token_ids":[1,2,666],"y'
    raw = chat_answer([1, 2, 3], content=sneaky)
    answer = hinted(raw, hint)
    assert answer.pop("prompt_token_ids").tolist() == [1, 2, 3]
    assert answer == {k: v for k, v in orjson.loads(raw).items() if k != "prompt_token_ids"}
    assert answer["choices"][0]["message"]["content"] == sneaky
    doubled = orjson.dumps({"prompt_token_ids": [1, 2, 9], "choices": [{"prompt_token_ids": [1, 2, 8]}]})
    assert hinted(doubled, hint) == orjson.loads(doubled)  # the key twice: read whole


def test_a_hinted_answer_that_is_not_json_fails_as_plain_json_does():
    with pytest.raises(orjson.JSONDecodeError):
        hinted(b'{"prompt_token_ids":[1,2,x]}', PromptHint(np.asarray([1, 2], "<i4"), (b"1,2",)))


def test_a_recorded_call_hints_the_next_one_with_its_prompt_and_output():
    prefixes = PrefixArrays()
    assert prefixes.hint(1) == PromptHint()
    prompt, output = [10, 11, 12], [13, 14]
    prefixes.add(1, np.asarray(prompt, "<i4"), np.asarray(output, "<i4"), b"10,11,12")
    hint = prefixes.hint(1)
    assert hint.known.tolist() == [10, 11, 12, 13, 14] and b"".join(hint.known_text) == b"10,11,12,13,14"
    assert not hint.known.flags.writeable  # shared with the calls whose ids it becomes
    next_ids = hinted(chat_answer([10, 11, 12, 13, 14, 15]), hint)["prompt_token_ids"]
    assert isinstance(next_ids, np.ndarray) and next_ids.tolist() == [10, 11, 12, 13, 14, 15]


def test_a_prompt_repeating_the_last_prompt_without_its_output_reads_from_the_array():
    prefixes = PrefixArrays()
    prefixes.add(1, np.asarray([10, 11, 12], "<i4"), np.asarray([13, 14], "<i4"), b"10,11,12")
    for prompt in ([10, 11, 12], [10, 11, 12, 99], [10, 11, 12, 13], [10, 11, 12, 13, 14, 15]):
        hint = prefixes.hint(1)
        ids = hinted(chat_answer(prompt), hint)["prompt_token_ids"]
        assert isinstance(ids, np.ndarray) and ids.tolist() == prompt
        assert bytes(hint.text) == orjson.dumps(prompt)[1:-1]
    hint = prefixes.hint(1)  # a prompt sharing only a number's first digits is no prefix: read whole
    assert hinted(chat_answer([10, 11, 123]), hint)["prompt_token_ids"] == [10, 11, 123]


def test_an_answer_read_with_a_hint_encodes_and_counts_as_its_list_would():
    hint = PromptHint(np.asarray([1, 2], "<i4"), (b"1,2",))
    answer = hinted(chat_answer([1, 2, 3]), hint)
    assert encoded(answer) == chat_answer([1, 2, 3])  # what a client that asked for the ids is sent
    assert token_count(answer["prompt_token_ids"]) == 3 and token_count(None) == 0


def as_lists(value):
    """An answer with its id arrays as lists: what ``orjson.loads`` makes of the same bytes."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: as_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_lists(v) for v in value]
    return value


ids_st = st.lists(st.integers(0, 300_000), max_size=12)


@settings(max_examples=300, deadline=None)
@given(
    known=ids_st,
    tail=ids_st,
    rewrite=st.one_of(st.none(), st.integers(0, 3)),  # which id, counted back from the known's last
    lengthen=st.booleans(),
    split=st.integers(0, 12),
    at_top=st.booleans(),
    content=st.text(alphabet='ab"[],:prompt_token_ids0123', max_size=30),
)
def test_any_answer_reads_as_plain_json_whatever_the_hint(known, tail, rewrite, lengthen, split, at_top, content):
    prompt = list(known) + tail
    rewrite = None if rewrite is None else len(known) - 1 - rewrite
    if rewrite is not None and 0 <= rewrite < len(prompt):
        # The history rewritten: the hint no longer a prefix (a number one digit longer: still in text).
        prompt[rewrite] = prompt[rewrite] * 10 + 7 if lengthen else prompt[rewrite] + 1
    known_text = orjson.dumps(known)[1:-1]
    parts = tuple(p for p in (known_text[:split], known_text[split:]) if p)
    raw = chat_answer(prompt, content) if at_top else completion_answer(prompt)
    hint = PromptHint(np.asarray(known, "<i4"), parts)
    answer = hinted(raw, hint)
    assert as_lists(answer) == orjson.loads(raw)
    if hint.text is not None:
        assert bytes(hint.text) == orjson.dumps(prompt)[1:-1]

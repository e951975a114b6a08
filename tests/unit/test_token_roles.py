"""Token roles (issue 61): every recorded call says, for each prompt token, which part of the conversation
it came from, in every dialect and both capture modes; the tokens of a tool result are exactly it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gateway.tito.renderer import RolloutText, TurnRenderer
from store.records import TokenRole
from tests.fake_tokens import FakeReply
from tests.role_calls import (
    CHAT_TOOL,
    DIALECTS,
    SYSTEM_TEXT,
    TOOL_RESULT,
    USER_TEXT,
    assert_roles_mark_the_conversation,
    converse,
    recorded,
    roles_of,
    script,
    vllm_prompt,
)


def unknown_roles(gateway, capture: str, reason: str) -> float:
    registry = gateway.state.books.metrics.registry
    return registry.get_sample_value("harnessrl_unknown_roles_total", {"capture": capture, "reason": reason}) or 0.0


@pytest.mark.parametrize("capture", ["tito", "engine"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_every_prompt_token_has_a_role_and_the_tool_tokens_are_the_tool_result(
    tito_gateway, tiny_model_dir, model_text, monkeypatch, dialect, capture
):
    tito_gateway.fake.render_prompt = vllm_prompt(tiny_model_dir)  # engine capture: the ids vLLM renders
    script(tito_gateway)
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run=f"roles-{capture}", capture=capture)
    await converse(tito_gateway, dialect, rollout["token"])
    first, last = records
    assert first.dialect == last.dialect == dialect
    assert TokenRole.UNKNOWN not in roles_of(first)
    assert_roles_mark_the_conversation(last, model_text.decode)
    assert unknown_roles(tito_gateway, capture, "mismatch") == unknown_roles(tito_gateway, capture, "unplaced") == 0


@pytest.mark.parametrize("capture", ["tito", "engine"])
async def test_a_streamed_call_has_the_roles_of_the_same_call_unstreamed(
    tito_gateway, tiny_model_dir, model_text, monkeypatch, capture
):
    tito_gateway.fake.render_prompt = vllm_prompt(tiny_model_dir)
    script(tito_gateway)
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run=f"stream-{capture}", capture=capture)
    await converse(tito_gateway, "chat", rollout["token"], stream=True)
    assert_roles_mark_the_conversation(records[-1], model_text.decode)


async def test_engine_capture_whose_rendering_differs_from_the_engines_has_unknown_roles_counted(
    tito_gateway, monkeypatch
):
    # The fake engine renders its own byte-level ChatML here, not the model's template: a mismatch.
    script(tito_gateway)
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run="mismatch", capture="engine")
    await converse(tito_gateway, "chat", rollout["token"])
    assert [r.prompt_roles for r in records] == [None, None]
    assert unknown_roles(tito_gateway, "engine", "mismatch") == 2


async def test_engine_capture_without_the_models_tokenizer_has_unknown_roles_counted(gateway, monkeypatch):
    records = recorded(gateway, monkeypatch)
    rollout = await gateway.new_rollout(run="no-tokenizer", capture="engine")
    client = gateway.openai(api_key=rollout["token"])
    for _ in range(2):
        await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}])
    assert [r.prompt_roles for r in records] == [None, None]
    assert unknown_roles(gateway, "engine", "no_renderer") == 2


async def test_a_raw_completion_has_no_roles(tito_gateway, monkeypatch):
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run="raw", capture="engine")
    await tito_gateway.openai(api_key=rollout["token"]).completions.create(model="policy", prompt="Once upon")
    [record] = records
    assert record.dialect == "completions" and record.prompt_roles is None


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": SYSTEM_TEXT}, {"role": "user", "content": USER_TEXT}]
    for n in range(turns):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"n": n})}}
        messages += [
            {"role": "assistant", "content": f"Reading {n}.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"{TOOL_RESULT} #{n}"},
        ]
    return messages


def test_a_new_turns_roles_extend_the_cached_ones_as_a_whole_rendering_makes_them(model_text):
    renderer, state = TurnRenderer(model_text), RolloutText()
    renderer.prompt_ids(conversation(5), [CHAT_TOOL], state)
    grown = renderer.prompt_ids(conversation(6), [CHAT_TOOL], state)
    whole = TurnRenderer(model_text).prompt_ids(conversation(6), [CHAT_TOOL], RolloutText())
    assert grown.roles.tobytes() == whole.roles.tobytes() and len(grown.roles) == len(grown.ids)
    tool = grown.ids[grown.roles == TokenRole.TOOL].tolist()
    assert model_text.decode(tool) == "".join(f"{TOOL_RESULT} #{n}" for n in range(6))


def test_a_spliced_assistant_turn_is_the_models_sampled_ids_between_the_templates_glue(model_text):
    renderer, state = TurnRenderer(model_text), RolloutText()
    message = {"role": "assistant", "content": "Sampled text."}
    sampled = [*model_text.encode("Sampled text."), model_text.eos_id]
    state.remember(message, sampled)
    prompt = renderer.prompt_ids([{"role": "user", "content": USER_TEXT}, message], None, state)
    spliced = renderer.spliced(sampled)
    start = len(prompt.ids) - len(spliced) - len(renderer.generation_prompt)
    roles = prompt.roles[start : start + len(spliced)].tolist()
    header, after = len(renderer.generation_prompt), len(spliced) - len(renderer.generation_prompt) - len(sampled)
    assert roles == [TokenRole.TEMPLATE] * header + [TokenRole.ASSISTANT] * len(sampled) + [TokenRole.TEMPLATE] * after
    assert prompt.ids[start + header : start + header + len(sampled)].tolist() == sampled


def test_a_turn_whose_role_the_gateway_does_not_know_is_unknown_never_guessed(model_text):
    messages = [{"role": "user", "content": USER_TEXT}, {"role": "critic", "content": TOOL_RESULT}]
    prompt = TurnRenderer(model_text).prompt_ids(messages, None, RolloutText())
    assert prompt.unplaced == 1
    roles = prompt.roles
    critic = model_text.decode(prompt.ids[roles == TokenRole.UNKNOWN].tolist())
    assert TOOL_RESULT in critic and critic.startswith("<|im_start|>critic")
    assert model_text.decode(prompt.ids[roles == TokenRole.USER].tolist()) == USER_TEXT


def test_a_token_a_tool_result_shares_with_the_template_is_the_tool_results(model_text):
    # A result's last newline and the template's next one are one token: it carries the result's.
    messages = [{"role": "user", "content": USER_TEXT}, *conversation(1)[2:3]]
    messages.append({"role": "tool", "tool_call_id": "c0", "content": "x = 1\n"})
    prompt = TurnRenderer(model_text).prompt_ids(messages, None, RolloutText())
    tool = model_text.decode(prompt.ids[prompt.roles == TokenRole.TOOL].tolist())
    assert tool == "x = 1\n\n"
    assert np.all(prompt.roles != TokenRole.UNKNOWN)


async def test_a_tito_conversation_keeps_exact_roles_over_many_turns(tito_gateway, model_text, monkeypatch):
    turns = 4
    tito_gateway.fake.script = [FakeReply(tool_calls=(("read_file", {"n": n}),)) for n in range(turns)]
    tito_gateway.fake.script.append(FakeReply(content="Done."))
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run="many", capture="tito")
    client = tito_gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": USER_TEXT}]
    for n in range(turns + 1):
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=[CHAT_TOOL])).choices
        calls = [c.model_dump() for c in reply[0].message.tool_calls or []]
        messages.append({"role": "assistant", "content": reply[0].message.content, "tool_calls": calls or None})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{TOOL_RESULT} #{n}"} for c in calls]
    last = records[-1]
    roles = roles_of(last)
    assert TokenRole.UNKNOWN not in roles
    tool = model_text.decode(np.asarray(last.prompt_ids)[roles == TokenRole.TOOL].tolist())
    assert tool == "".join(f"{TOOL_RESULT} #{n}" for n in range(turns))
    output_roles = roles[len(records[-2].prompt_ids) : len(records[-2].prompt_ids) + len(records[-2].output_ids)]
    assert set(output_roles.tolist()) == {TokenRole.ASSISTANT}  # the previous call's sampled ids, spliced


def test_a_tokenizer_that_trims_offsets_is_read_untrimmed_with_the_same_ids(model_text):
    from tokenizers import Tokenizer, processors

    from gateway.tito.template import _untrimmed

    trimming = Tokenizer.from_str(model_text.tokenizer.to_str())
    trimming.post_processor = processors.ByteLevel(trim_offsets=True)
    text = "a    b\n\n  c"
    untrimmed = _untrimmed(trimming).encode(text, add_special_tokens=False)
    assert untrimmed.ids == trimming.encode(text, add_special_tokens=False).ids
    assert sum(end - start for start, end in untrimmed.offsets) == len(text)  # every character in one token
    trimmed = trimming.encode(text, add_special_tokens=False).offsets
    assert sum(end - start for start, end in trimmed) < len(text)  # what it would have lost: runs of spaces

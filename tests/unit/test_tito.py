"""tito capture: rendering with the model's template, splicing sampled tokens, no drift forks."""

from __future__ import annotations

import json

import orjson

from gateway.tito.renderer import RolloutText, TurnRenderer
from tests.fake_tokens import FakeReply
from tests.gateway_harness import GatewayHarness

TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
    for n in range(turns):
        messages += [
            {
                "role": "assistant",
                "content": f"Looking at file {n}.",
                "tool_calls": [
                    {
                        "id": f"c{n}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{n}.py"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"print({n})"},
        ]
    return messages


def test_rendering_turn_by_turn_equals_the_whole_template(model_text, tiny_model_dir):
    from transformers import AutoTokenizer

    messages = conversation(3) + [{"role": "tool", "tool_call_id": "c2", "content": "second result"}]
    prompt = TurnRenderer(model_text).prompt_ids(messages, [TOOL], RolloutText())
    reference = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        [dict(m) for m in messages], tools=[TOOL], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert prompt.ids.tolist() == list(reference)
    assert orjson.loads(b"".join(prompt.json)) == list(reference)  # the JSON the engine is sent


def test_a_new_turn_costs_only_its_own_rendering(model_text, monkeypatch):
    renderer, state = TurnRenderer(model_text), RolloutText()
    renderer.prompt_ids(conversation(20), [TOOL], state)
    rendered = []
    original = model_text.template.render
    monkeypatch.setattr(model_text.template, "render", lambda m, *a, **k: rendered.append(m) or original(m, *a, **k))
    prompt = renderer.prompt_ids(conversation(21), [TOOL], state)
    # The tool turn twice: with its content, and with a marker in its place (where its roles lie).
    assert [[m["role"] for m in turn] for turn in rendered] == [["assistant"], ["tool"], ["tool"]]
    whole = TurnRenderer(model_text).prompt_ids(conversation(21), [TOOL], RolloutText())
    assert prompt.ids.tolist() == whole.ids.tolist() == orjson.loads(b"".join(prompt.json))
    assert not prompt.ids.flags.writeable  # the next turn's prompt is made from a view of it


def test_a_resent_history_lends_its_turns_and_a_tool_result_joining_the_last_turn_is_rendered_anew(
    model_text, monkeypatch
):
    renderer, state = TurnRenderer(model_text), RolloutText()
    messages = conversation(5)
    renderer.prompt_ids(messages, [TOOL], state)
    first = state.conversations[0]
    rendered = []
    original = model_text.template.render
    monkeypatch.setattr(model_text.template, "render", lambda m, *a, **k: rendered.append(m) or original(m, *a, **k))
    joined = [*messages, {"role": "tool", "tool_call_id": "c4", "content": "second result"}]  # the same objects
    prompt = renderer.prompt_ids(joined, [TOOL], state)
    assert [[m["role"] for m in turn] for turn in rendered] == [["tool", "tool"]] * 2  # and its roles' marked one
    assert len(first.turns[-1]) == 1  # the cached turn was not changed
    whole = TurnRenderer(model_text).prompt_ids(joined, [TOOL], RolloutText())
    assert prompt.ids.tolist() == whole.ids.tolist() == orjson.loads(b"".join(prompt.json))


async def run_tool_conversation(gateway: GatewayHarness, capture: str, turns: int) -> dict:
    # The model writes arguments with odd spacing; the agent echoes them back re-serialized.
    gateway.fake.script = [
        FakeReply(
            raw_text=f'Reading.\n<tool_call>\n{{"name": "read_file", "arguments": {{"path":   "f{n}.py"}}}}\n</tool_call>'
        )
        for n in range(turns - 1)
    ] + [FakeReply(content="Done: the bug is fixed.")]
    rollout = await gateway.new_rollout(run=f"{capture}-run", capture=capture)
    client = gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": "Fix the bug."}]
    for _ in range(turns):
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=[TOOL])).choices[0]
        calls = reply.message.tool_calls or []
        messages.append(
            {
                "role": "assistant",
                "content": reply.message.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": json.dumps(json.loads(c.function.arguments), separators=(",", ":")),
                        },
                    }
                    for c in calls
                ]
                or None,
            }
        )
        messages += [{"role": "tool", "tool_call_id": c.id, "content": "x = 1\n"} for c in calls]
    return rollout


async def test_ten_tool_turns_in_tito_make_one_sample_without_forks(tito_gateway):
    rollout = await run_tool_conversation(tito_gateway, "tito", turns=10)
    http = tito_gateway.http
    view = (await http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert view["graph"] == {"calls": 10, "roots": 1, "forks": 0, "drift_tokens": 0}
    calls = (await http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    [sample] = (await http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert sample["input_ids"] == calls[-1]["prompt_ids"] + calls[-1]["output_ids"]
    sent = [body["prompt"] for body in tito_gateway.fake.requests]
    for earlier, later, call in zip(sent, sent[1:], calls):
        assert later[: len(earlier) + len(call["output_ids"])] == earlier + call["output_ids"]
    assert sum(sample["loss_mask"]) == sum(len(c["output_ids"]) for c in calls)


async def test_a_history_rewrite_opens_a_new_root_in_tito(tito_gateway):
    rollout = await run_tool_conversation(tito_gateway, "tito", turns=3)
    client = tito_gateway.openai(api_key=rollout["token"])
    tito_gateway.fake.script = [FakeReply(content="Summary continues.")]
    await client.chat.completions.create(
        model="policy",
        tools=[TOOL],
        messages=[{"role": "user", "content": "Fix the bug. (Earlier turns were compacted.)"}],
    )
    calls = (await tito_gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert calls[-1]["parent_id"] is None and calls[-1]["fork_of"] is None
    samples = (await tito_gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert [len(s["call_ids"]) for s in samples] == [3, 1]


async def test_forced_tool_choice_is_refused_in_tito(tito_gateway):
    rollout = await tito_gateway.new_rollout(run="tito-forced", capture="tito")
    response = await tito_gateway.http.post(
        f"/r/{rollout['token']}/v1/chat/completions",
        json={
            "model": "policy",
            "messages": [{"role": "user", "content": "x"}],
            "tools": [TOOL],
            "tool_choice": "required",
        },
    )
    assert response.status_code == 400 and "tito" in response.json()["error"]["message"]


async def test_the_first_tito_calls_arriving_together_load_the_model_text_once(tito_gateway, monkeypatch):
    """Two threads importing transformers at once fail ("cannot import name 'AutoTokenizer'"): the
    first calls of a gateway, arriving together, must load the tokenizer in one thread, once."""
    import asyncio
    import threading

    import gateway.state

    loads: list[str] = []
    real = gateway.state.ModelText

    def counted(folder):
        loads.append(threading.current_thread().name)
        return real(folder)

    monkeypatch.setattr(gateway.state, "ModelText", counted)
    state = tito_gateway.state
    state._tito = None  # as a gateway before its first tito call
    first, second, third = await asyncio.gather(state.tito(), state.tito(), state.tito())
    assert len(loads) == 1 and first is second is third

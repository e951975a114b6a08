"""What the viewer reads of one rollout: its calls decoded to text token by token, the prompt mask of
what trains, the conversation traced to the calls, a demonstration's calls."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.builders import call_record, gateway_settings
from tests.fake_tokens import FakeReply
from tests.gateway_harness import GatewayHarness, start_gateway


@pytest.fixture
async def decoding_gateway(sqlite_db, fake_engine, fake_engine_server, tiny_model_dir) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, model_dir=str(tiny_model_dir))
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def path_of_three_calls(gateway: GatewayHarness, prompt: list[int]) -> list[int]:
    """Three calls, each extending the last (prompt + output + tool output), and a side call."""
    rollout = await gateway.new_rollout()
    store = gateway.app.state.gateway.store
    outputs, tool = [[40, 41], [42], [43, 44, 45]], [50, 51]
    ids, parent, context = [], None, list(prompt)
    for version, output in enumerate(outputs):
        logprobs = [-0.25 * (version + 1) - 0.125 * j for j in range(len(output))]  # exact in float32
        [call_id] = await store.insert_calls(
            [
                call_record(
                    rollout["id"],
                    prompt_ids=context,
                    output_ids=output,
                    output_logprobs=logprobs,
                    parent_id=parent,
                    policy_version=version,
                )
            ]
        )
        ids.append(call_id)
        parent, context = call_id, context + output + tool
    await store.insert_calls(
        [call_record(rollout["id"], tags=["title"], prompt_ids=[7], output_ids=[8], output_logprobs=[-1.0])]
    )
    return ids


async def test_prompt_mask_marks_what_the_samples_train_on(gateway):
    call_ids = await path_of_three_calls(gateway, [10, 11, 12])
    leaf = (await gateway.http.get(f"/api/calls/{call_ids[-1]}", params={"decode": "true"})).json()
    [sample] = (await gateway.http.get(f"/api/rollouts/{leaf['rollout_id']}/samples")).json()["data"]
    assert sample["call_ids"] == call_ids
    assert leaf["prompt_mask"] == sample["loss_mask"][: leaf["num_prompt_tokens"]]
    assert leaf["prompt_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 0, 0]
    # The sampler's logprobs and versions where an ancestor sampled the token: the sample's, else null / -1.
    prompt_len = leaf["num_prompt_tokens"]
    assert leaf["prompt_logprobs"] == [
        lp if m else None for lp, m in zip(sample["old_logprobs"][:prompt_len], sample["loss_mask"][:prompt_len])
    ]
    assert leaf["prompt_logprobs"] == [None, None, None, -0.25, -0.375, None, None, -0.5, None, None]
    assert leaf["prompt_versions"] == sample["policy_versions"][:prompt_len] == [-1, -1, -1, 0, 0, -1, -1, 1, -1, -1]
    assert leaf["prompt_text"] is None and leaf["prompt_pieces"] is None  # the plain gateway has no tokenizer
    first = (await gateway.http.get(f"/api/calls/{call_ids[0]}", params={"decode": "true"})).json()
    assert first["prompt_mask"] == [0, 0, 0] and first["prompt_logprobs"] == [None] * 3
    assert first["prompt_versions"] == [-1] * 3
    plain = (await gateway.http.get(f"/api/calls/{call_ids[0]}")).json()
    assert plain["prompt_mask"] is None and plain["prompt_ids"] == [10, 11, 12]
    assert plain["prompt_logprobs"] is None and plain["prompt_versions"] is None


async def test_decode_gives_text_and_one_piece_per_token(decoding_gateway, tiny_model_dir):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    prompt = tokenizer.encode("<|im_start|>user\nwhat is two plus two?<|im_end|>\n", add_special_tokens=False).ids
    call_ids = await path_of_three_calls(decoding_gateway, prompt)
    call = (await decoding_gateway.http.get(f"/api/calls/{call_ids[1]}", params={"decode": "true"})).json()
    assert call["prompt_text"] == tokenizer.decode(call["prompt_ids"], skip_special_tokens=False)
    assert call["prompt_text"].startswith("<|im_start|>user\nwhat is two plus two?")
    assert call["output_text"] == tokenizer.decode(call["output_ids"], skip_special_tokens=False)
    assert len(call["prompt_pieces"]) == len(call["prompt_ids"]) and len(call["output_pieces"]) == len(
        call["output_ids"]
    )
    assert "".join(call["prompt_pieces"][: len(prompt)]) == "<|im_start|>user\nwhat is two plus two?<|im_end|>\n"
    assert call["prompt_mask"] == [0] * len(prompt) + [1, 1, 0, 0]

    samples = (
        await decoding_gateway.http.get(f"/api/rollouts/{call['rollout_id']}/samples", params={"decode": "true"})
    ).json()["data"]
    assert [len(s["pieces"]) for s in samples] == [len(s["input_ids"]) for s in samples]
    assert samples[0]["pieces"] == [tokenizer.decode([i], skip_special_tokens=False) for i in samples[0]["input_ids"]]
    undecoded = (await decoding_gateway.http.get(f"/api/rollouts/{call['rollout_id']}/samples")).json()["data"]
    assert undecoded[0]["pieces"] is None


async def test_conversation_of_a_chat_rollout_traces_assistant_turns_to_calls(gateway):
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    gateway.fake.script = [
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="It is sunny."),
        FakeReply(content="A title"),
    ]
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather in Paris?"}]
    first = await client.chat.completions.with_raw_response.create(model="policy", messages=history)
    message = first.parse().choices[0].message
    [tool_call] = message.tool_calls
    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": tool_call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny"},
    ]
    second = await client.chat.completions.with_raw_response.create(model="policy", messages=history)
    # A side call (title generation) after the last turn is not the conversation.
    await client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": "Generate a short title for this conversation."},
            {"role": "user", "content": "weather in Paris?"},
        ],
    )
    body = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/conversation")).json()
    first_id, second_id = (int(r.headers["x-harnessrl-call-id"]) for r in (first, second))
    assert body["rollout_id"] == rollout["id"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "call_id": first_id,
            "tool_calls": [{"id": tool_call.id, "name": "get_weather", "arguments": tool_call.function.arguments}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": tool_call.id},
        {"role": "assistant", "content": "It is sunny.", "call_id": second_id},
    ]


async def test_conversation_of_an_anthropic_rollout_is_normalized_to_chat(gateway):
    rollout = await gateway.new_rollout(run="claude")
    gateway.fake.script = [FakeReply(content="Paris is sunny.")]
    body = {
        "model": "policy",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "You help."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather"}, {"type": "text", "text": "Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}]},
        ],
    }
    response = await gateway.http.post("/v1/messages", json=body, headers={"x-api-key": rollout["token"]})
    assert response.status_code == 200, response.text
    call_id = int(response.headers["x-harnessrl-call-id"])
    messages = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/conversation")).json()["messages"]
    assert messages == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "weather\nParis?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"id": "tu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "tu_1"},
        {"role": "assistant", "content": "Paris is sunny.", "call_id": call_id},
    ]
    empty = await gateway.new_rollout(run="claude")
    assert (await gateway.http.get(f"/api/rollouts/{empty['id']}/conversation")).json()["messages"] == []


async def test_a_demonstrations_calls_say_so_and_carry_no_sampler_logprobs(gateway):
    rollout = await gateway.new_rollout()
    store = gateway.app.state.gateway.store
    unsampled = dict(output_logprobs=None, source="demonstration")
    [parent] = await store.insert_calls([call_record(rollout["id"], prompt_ids=[1, 2], output_ids=[3, 4], **unsampled)])
    [child] = await store.insert_calls(
        [call_record(rollout["id"], prompt_ids=[1, 2, 3, 4, 5], output_ids=[6], parent_id=parent, **unsampled)]
    )
    leaf = (await gateway.http.get(f"/api/calls/{child}", params={"decode": "true"})).json()
    assert (leaf["source"], leaf["output_logprobs"]) == ("demonstration", None)
    assert leaf["prompt_mask"] == [0, 0, 1, 1, 0] and leaf["prompt_logprobs"] == [None] * 5  # sampled by nobody
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert sample["loss_mask"] == [0, 0, 1, 1, 0, 1] and sample["old_logprobs"] == [0, 0, None, None, 0, None]
    listed = (await gateway.http.get("/api/calls", params={"rollout_id": rollout["id"]})).json()["data"]
    assert [c["source"] for c in listed] == ["demonstration"] * 2
    policy = await gateway.new_rollout()
    [own] = await store.insert_calls([call_record(policy["id"])])
    assert (await gateway.http.get(f"/api/calls/{own}")).json()["source"] == "policy"

"""A rollout's resent history is parsed once: the result always equals json.loads of the whole body."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.request.json_body import parse_json_object
from gateway.request.resent_bodies import ResentBodies

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]), "content": JSON_VALUES})
LAYOUT = st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 2}, {"ensure_ascii": False}])


def body(head: dict, messages: list, tail: dict, layout: dict) -> bytes:
    return json.dumps({**head, "messages": messages, **tail}, **layout).encode()


def parsed_like_json_loads(bodies: ResentBodies, raw: bytes, rollout_id: int = 1) -> dict:
    got, expected = bodies.parse(raw, rollout_id), json.loads(raw)
    assert got == expected and list(got) == list(expected)
    assert json.dumps(got) == json.dumps(expected)  # the same types too (1 vs 1.0 vs true)
    return got


@settings(max_examples=150, deadline=None)
@given(
    head=st.dictionaries(st.sampled_from(["model", "stream", "n"]), JSON_VALUES, max_size=2),
    tail=st.dictionaries(st.sampled_from(["tools", "max_tokens", "extra"]), JSON_VALUES, max_size=2),
    turns=st.lists(st.lists(MESSAGE, min_size=0, max_size=3), min_size=1, max_size=5),
    rewrite=st.booleans(),
    layout=LAYOUT,
)
def test_a_rollouts_bodies_parse_as_json_loads_parses_them(head, tail, turns, rewrite, layout):
    bodies, messages, previous = ResentBodies(), [], None
    for new in turns:
        messages = [*messages, *new]
        got = parsed_like_json_loads(bodies, body(head, messages, tail, layout))
        if previous and previous["messages"]:  # read as a delta: the known messages were not parsed again
            assert got["messages"][0] is previous["messages"][0]
        previous = got
    if rewrite and messages:  # the agent rewrote its history: the known text no longer prefixes it
        parsed_like_json_loads(bodies, body(head, [{"role": "user", "content": "x"}, *messages[1:]], tail, layout))


def test_the_known_messages_are_the_same_objects_and_only_the_new_ones_are_parsed():
    bodies = ResentBodies()
    first = parsed_like_json_loads(bodies, body({"model": "m"}, [{"role": "user", "content": "a"}], {}, {}))
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    second = parsed_like_json_loads(bodies, body({"model": "m"}, two, {"tools": []}, {}))
    assert second["messages"][0] is first["messages"][0]
    other_rollout = parsed_like_json_loads(bodies, body({"model": "m"}, [{"role": "user", "content": "a"}], {}, {}), 2)
    assert other_rollout["messages"][0] is not first["messages"][0]  # one rollout never leans on another's


@pytest.mark.parametrize(
    "second",
    [
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "user"',  # cut short
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}], "messages": []}',  # the key twice
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}]} trailing',
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}, ]}',
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}]12',
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b'{"model": "m", "messages": [{"role": "user", "content": "a"}, "\xff"]}',
    ],
)
def test_a_bad_body_after_a_known_one_is_refused_as_parse_json_object_refuses_it(second):
    bodies = ResentBodies()
    parsed_like_json_loads(bodies, b'{"model": "m", "messages": [{"role": "user", "content": "a"}]}')
    try:
        expected = parse_json_object(second)
    except InvalidRequest as refused:
        with pytest.raises(InvalidRequest) as got:
            bodies.parse(second, 1)
        assert got.value.message == refused.message
    else:
        assert bodies.parse(second, 1) == expected


def test_a_body_without_a_messages_array_parses_whole_and_is_not_kept():
    bodies = ResentBodies()
    assert bodies.parse(b'{"model": "m", "prompt": "x"}', 1) == {"model": "m", "prompt": "x"}
    assert bodies.parse(b'{"model": "m", "messages": "x"}', 1) == {"model": "m", "messages": "x"}
    with pytest.raises(InvalidRequest, match="must be a JSON object"):
        bodies.parse(b"[1, 2]", 1)


async def test_the_chat_route_refuses_a_bad_body_before_an_unknown_token_as_every_route_does(gateway):
    headers = {"authorization": "Bearer hrl-unknown", "content-type": "application/json"}
    bad = await gateway.http.post("/v1/chat/completions", content=b'{"messages": [', headers=headers)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    unknown = await gateway.http.post("/v1/chat/completions", content=json.dumps({"messages": []}), headers=headers)
    assert unknown.status_code == 401 and unknown.json()["error"]["code"] == "invalid_api_key"


async def test_a_rollouts_turns_through_the_chat_route_are_recorded_as_sent(gateway):
    rollout = await gateway.new_rollout()
    first = [{"role": "user", "content": "hi"}]
    turns = [first, [*first, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "go"}], first]
    for messages in turns:  # the third rewrites the history: read whole again
        sent = {"model": "policy", "messages": messages, "max_tokens": 8}
        response = await gateway.agent.post(f"/r/{rollout['token']}/v1/chat/completions", json=sent)
        assert response.status_code == 200, response.text
        call = (await gateway.http.get(f"/api/calls/{response.headers['x-harnessrl-call-id']}")).json()
        assert call["request"] == sent and call["rollout_id"] == rollout["id"]


def test_responses_input_items_are_read_as_a_delta_too_and_a_string_input_whole():
    bodies = ResentBodies("input")
    items = [{"type": "message", "role": "user", "content": "a"}]
    first = parsed_like_json_loads(bodies, json.dumps({"model": "m", "input": items}).encode())
    more = [*items, {"type": "function_call_output", "call_id": "c", "output": "x"}]
    second = parsed_like_json_loads(bodies, json.dumps({"model": "m", "input": more, "tools": []}).encode())
    assert second["input"][0] is first["input"][0]
    parsed_like_json_loads(bodies, json.dumps({"model": "m", "input": "just text"}).encode())

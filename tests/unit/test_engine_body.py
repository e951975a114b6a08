"""Engine bodies encoded once per new message: byte-identical to encoding the whole body."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.engine.body import EncodedBody, EngineBodies
from gateway.engine.client import encoded


def engine_body(messages: list, **extra) -> dict:
    return {"model": "policy", "messages": messages, "return_token_ids": True, **extra}


def message(role: str, content) -> dict:
    return {"role": role, "content": content}


def test_a_body_extending_the_last_ones_messages_encodes_as_the_whole_body_would():
    bodies = EngineBodies()
    messages = [message("system", "be brief"), message("user", "fix it ü")]
    first = bodies.encode(1, engine_body(messages))
    later = engine_body([*messages, message("assistant", None), message("tool", "out")], max_tokens=9)
    for body, plain in ((first, engine_body(messages)), (bodies.encode(1, later), later)):
        assert isinstance(body, EncodedBody) and encoded(body) == orjson.dumps(plain)
        assert body == plain  # still the body, for whoever routes it


@pytest.mark.parametrize(
    "resent_by, sent",
    [
        (1, b'"before"'),  # its own rollout: the known JSON reused, not remade
        (2, b'"after"'),  # another rollout: never reused, encoded as it is now
    ],
)
def test_a_resent_history_is_not_encoded_again_by_its_own_rollout_only(resent_by, sent):
    """Deliberately changing a known message in place shows whether its JSON was reused or remade."""
    bodies = EngineBodies()
    known = message("user", "before")
    bodies.encode(1, engine_body([known]))
    known["content"] = "after"
    assert sent in encoded(bodies.encode(resent_by, engine_body([known, message("tool", "x")])))


def test_equal_but_different_messages_are_encoded_as_they_are():
    """1 and 1.0 are equal in Python; the engine must get the one the client sent."""
    bodies = EngineBodies()
    bodies.encode(1, engine_body([message("user", [{"type": "text", "text": "a", "n": 1}])]))
    resent = engine_body([message("user", [{"type": "text", "text": "a", "n": 1.0}]), message("tool", "x")])
    assert encoded(bodies.encode(1, resent)) == orjson.dumps(resent)


def test_a_body_orjson_refuses_is_left_to_the_engine_clients_encoding():
    bodies = EngineBodies()
    body = engine_body([message("user", "hi")], seed=2**70)
    assert bodies.encode(1, body) is body
    assert orjson.loads(encoded(body))["seed"] == 2**70


def test_an_encoded_body_cannot_be_changed():
    body = EngineBodies().encode(1, engine_body([message("user", "hi")]))
    with pytest.raises(TypeError, match="read-only"):
        body["model"] = "other"
    with pytest.raises(TypeError, match="read-only"):
        body.pop("model")


contents = st.one_of(st.text(max_size=8), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.none())
messages_st = st.lists(st.builds(message, st.sampled_from(["user", "assistant", "tool"]), contents), max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["extend", "resend", "rewrite", "shorten"]), messages_st), max_size=8))
def test_any_sequence_of_turns_encodes_byte_identically(turns):
    bodies, history = EngineBodies(), []
    for kind, new in turns:
        if kind == "extend":
            history = [*history, *new]
        elif kind == "rewrite":  # equal-valued copies and changed values alike: new objects
            history = [dict(m) for m in history[:1]] + new + history[1:]
        elif kind == "shorten":
            history = history[: len(history) // 2]
        body = engine_body(list(history))
        assert encoded(bodies.encode(7, body)) == orjson.dumps(body)


def test_a_nul_in_any_string_does_not_pass_for_where_the_messages_go():
    bodies = EngineBodies()
    for body in (
        engine_body([message("user", "a\x00b")], user="x\x00y"),
        engine_body([message("user", "a\x00b"), message("tool", "\x00")], user="x\x00y"),
    ):
        assert encoded(bodies.encode(3, body)) == orjson.dumps(body)

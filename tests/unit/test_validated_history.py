"""Chat requests validated once per new message: what extends a rollout's last valid messages has only
its new messages validated, and every refusal still names the bad field's place in the whole body."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, field_validator

from gateway.errors import InvalidRequest
from gateway.openai.protocol import ChatCompletionRequest
from gateway.request.validated_history import ValidatedHistory
from gateway.request.validation import parse_request

VALIDATED: list[str] = []


class Message(BaseModel):
    role: str
    content: str

    @field_validator("content")
    @classmethod
    def counted(cls, value: str) -> str:
        VALIDATED.append(value)
        return value


class Request(BaseModel):
    model: str
    messages: list[Message]


def whole_refusal(raw: dict) -> tuple[str, str | None]:
    """What validating the whole body says (as before per-message validation)."""
    with pytest.raises(InvalidRequest) as refused:
        parse_request(ChatCompletionRequest, raw)
    return refused.value.message, refused.value.param


def turns(n: int) -> list[dict]:
    return [{"role": "user", "content": f"turn {i}"} for i in range(n)]


def test_a_request_extending_the_rollouts_last_messages_validates_only_the_new_ones():
    history, VALIDATED[:] = ValidatedHistory(), []
    history.parse(Request, {"model": "m", "messages": turns(3)}, rollout_id=1)
    history.parse(Request, {"model": "m", "messages": turns(5)}, rollout_id=1)
    assert VALIDATED == ["turn 0", "turn 1", "turn 2", "turn 3", "turn 4"]


def test_other_rollouts_and_rewritten_histories_are_validated_whole():
    history, VALIDATED[:] = ValidatedHistory(), []
    history.parse(Request, {"model": "m", "messages": turns(2)}, rollout_id=1)
    history.parse(Request, {"model": "m", "messages": turns(3)}, rollout_id=2)
    rewritten = [{"role": "user", "content": "edited"}, *turns(3)[1:]]
    history.parse(Request, {"model": "m", "messages": rewritten}, rollout_id=1)
    assert VALIDATED == ["turn 0", "turn 1", "turn 0", "turn 1", "turn 2", "edited", "turn 1", "turn 2"]


def test_a_bad_new_message_is_refused_by_its_place_in_the_whole_body():
    history = ValidatedHistory()
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    history.parse(ChatCompletionRequest, {"model": "policy", "messages": messages}, rollout_id=7)
    bad = {"model": "policy", "messages": [*messages, {"content": "no role"}]}
    with pytest.raises(InvalidRequest) as refused:
        history.parse(ChatCompletionRequest, bad, rollout_id=7)
    assert (refused.value.message, refused.value.param) == whole_refusal(bad)
    assert refused.value.param.startswith("messages.2")


def test_a_refused_request_is_no_base_for_the_next():
    history = ValidatedHistory()
    good = [{"role": "user", "content": "hi"}]
    with pytest.raises(InvalidRequest):
        history.parse(ChatCompletionRequest, {"model": "policy", "messages": [{"content": "x"}]}, rollout_id=3)
    history.parse(ChatCompletionRequest, {"model": "policy", "messages": good}, rollout_id=3)
    with pytest.raises(InvalidRequest) as refused:  # its old bad message resent behind the good one
        history.parse(ChatCompletionRequest, {"model": "policy", "messages": [*good, {"content": "x"}]}, rollout_id=3)
    assert refused.value.param.startswith("messages.1")


async def test_the_gateway_refuses_a_bad_turn_after_good_ones_naming_its_place(gateway):
    rollout = await gateway.new_rollout()
    headers = {"authorization": f"Bearer {rollout['token']}"}
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(2):
        answer = await gateway.agent.post(
            "/v1/chat/completions", json={"model": "policy", "messages": messages}, headers=headers
        )
        assert answer.status_code == 200, answer.text
        messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
    bad = [*messages, {"role": "user", "content": [{"type": "no-such-part"}]}]
    refused = await gateway.agent.post(
        "/v1/chat/completions", json={"model": "policy", "messages": bad}, headers=headers
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["param"].startswith(f"messages.{len(messages)}.content")


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def test_a_new_message_nested_too_deep_is_refused_though_the_history_before_it_is_known():
    history = ValidatedHistory()
    first = {"model": "m", "messages": turns(2)}
    history.parse(Request, first, rollout_id=1)
    bad = {"model": "m", "messages": [*turns(2), {"role": "user", "content": "x", "extra": deep(200)}]}
    with pytest.raises(InvalidRequest, match="nested more than"):
        history.parse(Request, bad, rollout_id=1)
    with pytest.raises(InvalidRequest, match="nested more than"):  # and outside the messages, too
        history.parse(Request, {**first, "messages": turns(3), "meta": deep(200)}, rollout_id=1)
    with pytest.raises(InvalidRequest, match="nested more than"):  # a first request is checked whole
        history.parse(Request, {"model": "m", "messages": [{"role": "user", "content": "x", "e": deep(200)}]}, 2)

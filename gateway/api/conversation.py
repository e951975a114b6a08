"""A rollout's conversation as the agent saw it, in one chat shape whatever the dialect.

The last non-side call's request holds the whole history the agent sent; its recorded answer is
the last turn. Requests are normalized with the same translations the dialects use to reach the
engine (Responses items and Anthropic blocks become chat messages), so the viewer sees what the
model was prompted with. Assistant turns are traced back to the recorded call whose answer they
repeat, matched by content and tool calls in call order.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from gateway.anthropic.protocol import MessagesRequest
from gateway.anthropic.serving import chat_messages as messages_as_chat
from gateway.dialects import CHAT, COMPLETIONS, MESSAGES, RESPONSES
from gateway.errors import GatewayError
from gateway.responses.protocol import ResponsesRequest
from gateway.responses.serving import chat_messages as responses_as_chat
from store.records import StoredCall
from store.store import Store


async def rollout_conversation(store: Store, rollout_id: int) -> list[dict]:
    """The rollout's conversation (REST and ``harnessrl show``): its last main call, normalized."""
    call = await store.calls.last_main(rollout_id)
    if call is None:
        return []
    return conversation(call, await store.calls.answers_before(rollout_id, call.id))


def conversation(call: StoredCall, earlier: list[tuple[int, dict]]) -> list[dict]:
    """Normalized messages of ``call``'s request plus its answer; ``earlier``: (id, response) before it."""
    messages = [normalize(m) for m in request_messages(call.dialect, call.request or {})]
    answer = answer_message(call.response or {})
    _attribute(messages, earlier)
    if answer is not None:
        messages.append({**normalize(answer), "call_id": call.id})
    return messages


def _chat_history(request: dict) -> list[dict]:
    messages = request.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _completions_history(request: dict) -> list[dict]:
    prompt = request.get("prompt")
    return [{"role": "user", "content": prompt if isinstance(prompt, str) else json.dumps(prompt)}]


# A recorded request body -> the chat messages the engine was prompted with, by the recorded call's
# dialect, through the same translations the dialects use to reach the engine.
HISTORIES = {
    CHAT.name: _chat_history,
    COMPLETIONS.name: _completions_history,
    RESPONSES.name: lambda request: responses_as_chat(ResponsesRequest.model_validate(request)),
    MESSAGES.name: lambda request: messages_as_chat(MessagesRequest.model_validate(request)),
}


def request_messages(dialect: str, request: dict) -> list[dict]:
    """The request's history as chat messages (the client's own shape for chat)."""
    history = HISTORIES.get(dialect)
    try:
        return history(request) if history else []
    except (ValidationError, GatewayError):  # recorded bodies were valid; an older shape shows nothing
        return []


def answer_message(response: dict) -> dict | None:
    """The engine's answer as an assistant message (chat.completion or text_completion)."""
    choice = (response.get("choices") or [None])[0]
    if not isinstance(choice, dict):
        return None
    if isinstance(choice.get("message"), dict):
        return {"role": "assistant", **choice["message"]}
    return {"role": "assistant", "content": choice.get("text") or ""}


def normalize(message: dict) -> dict:
    """``{role, content: str, tool_calls?, tool_call_id?}`` from any chat message."""
    normal = {"role": str(message.get("role") or "user"), "content": _text(message.get("content"))}
    calls = [_tool_call(c) for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        normal["tool_calls"] = calls
    if message.get("tool_call_id") is not None:
        normal["tool_call_id"] = str(message["tool_call_id"])
    return normal


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: text joined, anything else named
        return "\n".join(
            p.get("text", "")
            if p.get("type") in ("text", "input_text", "output_text")
            else f"[{p.get('type', 'part')}]"
            for p in content
            if isinstance(p, dict)
        )
    return json.dumps(content)


def _tool_call(call: dict) -> dict:
    function = call.get("function") or {}
    arguments = function.get("arguments", "")
    return {
        "id": str(call.get("id") or ""),
        "name": str(function.get("name") or ""),
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
    }


def _attribute(messages: list[dict], earlier: list[tuple[int, dict]]) -> None:
    """Set ``call_id`` on assistant messages that repeat an earlier answer, matching in call order."""
    candidates = [
        (call_id, _key(normalize(m)))
        for call_id, response in earlier
        if (m := answer_message(response or {})) is not None
    ]
    position = 0
    for message in messages:
        if message["role"] != "assistant":
            continue
        key = _key(message)
        for index in range(position, len(candidates)):
            if candidates[index][1] == key:
                message["call_id"] = candidates[index][0]
                position = index + 1
                break


def _key(message: dict) -> tuple:
    # Agents re-serialize what they send back: whitespace around text and JSON key order may change.
    calls = tuple((c["name"], _canonical(c["arguments"])) for c in message.get("tool_calls") or [])
    return message["content"].strip(), calls


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (ValueError, TypeError):
        return arguments

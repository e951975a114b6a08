"""Re-tokenization skew: what a pipeline that keeps text instead of token ids would have trained on.

harnessrl trains on the ids the engine saw and sampled. A text pipeline re-renders each call's messages
with the chat template and re-tokenizes the model's output text; wherever that gives other ids, it
trains on tokens the policy never saw or sampled. This counts, per harness and model, how often that
happens on a run's recorded calls (``harnessrl health --model``):

- **prompt skew**: the chat template applied to the request's messages (and tools) gives other ids
  than the engine's prompt (a later turn whose prompt the gateway extended token for token, a template
  that renders history differently than the agent's first sight of it);
- **output skew**: decoding the sampled ids and encoding the text again gives other ids (a word the
  model spelled in pieces, which the tokenizer merges).

Only the chat dialect's requests are re-rendered (the others reach the template through the gateway's
translation); a call not re-rendered counts in ``calls``, not ``rendered``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from store.health import PolicyCall


@dataclass
class RetokenizationSkew:
    harness: str | None
    model: str  # the public model name the agent asked for
    calls: int = 0
    rendered: int = 0  # calls whose request was re-rendered
    prompt_skewed: int = 0  # of those, whose re-rendered prompt ids differ from the engine's
    output_skewed: int = 0  # calls whose output text re-encodes to other ids

    @property
    def prompt_share(self) -> float | None:
        return self.prompt_skewed / self.rendered if self.rendered else None

    @property
    def output_share(self) -> float | None:
        return self.output_skewed / self.calls if self.calls else None


def rerendered_prompt(tokenizer, request: dict) -> list[int] | None:
    """The chat template's ids for a chat request's messages and tools; None when it has none or the
    template refuses them."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    try:
        ids = tokenizer.apply_chat_template(
            [_template_message(m) for m in messages],
            tools=request.get("tools") or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
    except Exception:  # noqa: BLE001 - any template error means "not re-renderable", counted as such
        return None
    return [int(i) for i in ids]


def _template_message(message: Any) -> Any:
    """Tool-call arguments as the template expects them (a dict; the wire carries a JSON string),
    which is what vLLM's own rendering does."""
    if not isinstance(message, dict) or not message.get("tool_calls"):
        return message
    calls = []
    for call in message["tool_calls"]:
        function = dict(call.get("function") or {})
        if isinstance(function.get("arguments"), str):
            try:
                function["arguments"] = json.loads(function["arguments"])
            except json.JSONDecodeError:
                pass
        calls.append({**call, "function": function})
    return {**message, "tool_calls": calls}


def output_round_trip(tokenizer, output_ids: Sequence[int]) -> list[int]:
    """The ids of the sampled text encoded again (what a text pipeline trains on)."""
    text = tokenizer.decode(list(output_ids), skip_special_tokens=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def retokenization_skew(tokenizer, calls: Iterable[PolicyCall]) -> list[RetokenizationSkew]:
    """One row per (harness, model) of ``calls`` (``store.health.latest_policy_calls``)."""
    rows: dict[tuple, RetokenizationSkew] = {}
    for call in calls:
        row = rows.setdefault((call.harness, call.model), RetokenizationSkew(call.harness, call.model))
        row.calls += 1
        row.output_skewed += output_round_trip(tokenizer, call.output_ids) != call.output_ids
        prompt = rerendered_prompt(tokenizer, call.request) if call.dialect == "chat" else None
        if prompt is not None:
            row.rendered += 1
            row.prompt_skewed += prompt != call.prompt_ids
    return [rows[key] for key in sorted(rows, key=lambda k: (k[0] or "", k[1]))]

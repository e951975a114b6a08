"""The tito engine path: render and splice, send token ids to vLLM's completions, parse the text.

It answers with a body shaped like vLLM's ``chat.completion`` (``prompt_token_ids``,
``choices[0].token_ids``, logprobs), so dialects and recording treat both capture modes alike.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

import numpy as np

from gateway.engine.body import EncodedBody, with_json
from gateway.engine.client import EngineClient
from gateway.errors import InvalidRequest
from gateway.tito.parser import parse_output
from gateway.tito.renderer import RenderedPrompt, RolloutText, TurnRenderer
from gateway.tito.stream import TitoStream
from gateway.tito.template import ModelText

ROLLOUTS_CACHED = 1024
# Sampling fields passed through to vLLM's completions unchanged.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "user",
)

RecentOutputs = Callable[[int, int], Awaitable[list[tuple[dict, list[int]]]]]


class TitoEngine:
    def __init__(self, text: ModelText, engine: EngineClient, recent_outputs: RecentOutputs):
        self.text, self.engine = text, engine
        self.renderer = TurnRenderer(text)
        self._recent_outputs = recent_outputs
        self._rollouts: OrderedDict[int, RolloutText] = OrderedDict()
        self._engine_rollouts: OrderedDict[int, RolloutText] = OrderedDict()  # engine capture's roles

    async def chat(
        self, body: dict, engine_model: str, rollout_id: int, max_model_len: int | None, top_logprobs: int
    ) -> dict:
        state = await self._state(rollout_id)
        request, prompt_ids = self._request(body, engine_model, state, max_model_len, top_logprobs, stream=False)
        completion = await self.engine.completions(request)
        answer = self._chat_answer(completion, body, prompt_ids, _tools_enabled(body))
        self.remember(rollout_id, answer)
        return answer

    async def chat_stream(
        self, body: dict, engine_model: str, rollout_id: int, max_model_len: int | None, top_logprobs: int
    ) -> TitoStream:
        """``chat``, streamed: once the engine accepted the call, its answer as chat chunks. The caller
        ``remember``s the assembled answer (splicing) when the stream ends."""
        state = await self._state(rollout_id)
        request, prompt_ids = self._request(body, engine_model, state, max_model_len, top_logprobs, stream=True)
        stream = await self.engine.completions_stream(request)
        return TitoStream(stream, self.text, prompt_ids, body["model"], _tools_enabled(body))

    def remember(self, rollout_id: int, answer: dict) -> None:
        """The answer's sampled ids, spliced in when the agent sends this assistant turn back."""
        state = self._rollouts.get(rollout_id)
        if state is not None:
            choice = answer["choices"][0]
            state.remember(choice["message"], choice["token_ids"])

    def _request(
        self,
        body: dict,
        engine_model: str,
        state: RolloutText,
        max_model_len: int | None,
        top_logprobs: int,
        stream: bool,
    ) -> tuple[EncodedBody, np.ndarray]:
        """The completions request (its prompt's JSON joined from the turns', not written again) and
        the prompt ids."""
        _check_supported(body)
        prompt = self.renderer.prompt_ids(body["messages"], body.get("tools") or None, state)
        state.sent(prompt)  # its roles wait for the call's record (``take_roles``)
        request = {
            "model": engine_model,
            "prompt": prompt.ids,
            "logprobs": top_logprobs,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stream": stream,
            "max_tokens": _max_tokens(body, len(prompt.ids), max_model_len),
        }
        if stream:
            request["stream_options"] = {"include_usage": True}
        request.update({k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None})
        return with_json(request, "prompt", prompt.json)[0], prompt.ids

    def _chat_answer(self, completion: dict, body: dict, prompt_ids: np.ndarray, tools_enabled: bool) -> dict:
        choice = completion["choices"][0]
        output_ids = choice.get("token_ids") or []
        text_ids = output_ids[:-1] if output_ids and output_ids[-1] == self.text.eos_id else output_ids
        parsed = parse_output(self.text.decode(text_ids), tools_enabled)
        finish = choice.get("finish_reason")
        if parsed.tool_calls and finish == "stop":
            finish = "tool_calls"
        logprobs = choice.get("logprobs") or {}
        content = [
            {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}
            for token, logprob in zip(logprobs.get("tokens") or [], logprobs.get("token_logprobs") or [])
        ]
        usage = completion.get("usage") or {}
        return {
            "id": f"chatcmpl-tito-{secrets.token_hex(8)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": parsed.content,
                        "tool_calls": parsed.tool_calls,
                        "reasoning_content": parsed.reasoning,
                    },
                    "logprobs": {"content": content},
                    "finish_reason": finish,
                    "stop_reason": choice.get("stop_reason"),
                    "token_ids": output_ids,
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(output_ids),
                "total_tokens": len(prompt_ids) + len(output_ids),
                **{k: v for k, v in usage.items() if k not in ("prompt_tokens", "completion_tokens", "total_tokens")},
            },
            "prompt_token_ids": prompt_ids,
        }

    def take_roles(self, rollout_id: int, prompt_ids: np.ndarray) -> RenderedPrompt | None:
        """The rendered prompt (its roles) of a tito call whose answer carries these very prompt ids."""
        state = self._rollouts.get(rollout_id)
        return None if state is None else state.take_roles(prompt_ids)

    def engine_roles(self, rollout_id: int, body: dict, prompt_ids: np.ndarray) -> tuple[RenderedPrompt | None, str]:
        """An engine-captured call's prompt as this gateway renders it (no splicing: vLLM renders what the
        agent sent), and why there is none: "render_failed" (the gateway's rendering raised), "mismatch"
        (its ids are not the engine's). Each rollout's turns are cached as tito's are, apart from them."""
        state = _kept(self._engine_rollouts, rollout_id, self._engine_rollouts.get(rollout_id) or RolloutText())
        try:
            prompt = self.renderer.prompt_ids(body["messages"], vllm_tools(body.get("tools")), state)
        except Exception:  # a template error, or a message it cannot take: the engine rendered it its own way
            return None, "render_failed"
        if not np.array_equal(prompt.ids, prompt_ids):
            return None, "mismatch"
        return prompt, ""

    async def _state(self, rollout_id: int) -> RolloutText:
        state = self._rollouts.get(rollout_id)
        if state is None:
            state = RolloutText()
            for message, output_ids in await self._recent_outputs(rollout_id, 256):
                state.remember(message, output_ids)  # splicing survives a gateway restart
        return _kept(self._rollouts, rollout_id, state)


def _kept(cache: OrderedDict[int, RolloutText], rollout_id: int, state: RolloutText) -> RolloutText:
    """The rollout's state in ``cache`` (``state`` where it has none yet, as another call may have put one there
    meanwhile), now its most recent; the least recent dropped past ROLLOUTS_CACHED."""
    state = cache.setdefault(rollout_id, state)
    cache.move_to_end(rollout_id)
    if len(cache) > ROLLOUTS_CACHED:
        cache.popitem(last=False)
    return state


def vllm_tools(tools: list[dict] | None) -> list[dict] | None:
    """Function tools as vLLM's chat endpoint hands them to the template (its pydantic models dumped):
    ``type`` then ``function`` of ``name``, ``description`` (null when absent), ``parameters``, and
    ``strict`` / ``defer_loading`` only when set."""
    if not tools:
        return None
    dumped = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or tool.get("type", "function") != "function":
            dumped.append(tool)
            continue
        fields = {k: function.get(k) for k in ("name", "description", "parameters")}
        fields.update({k: function[k] for k in ("strict", "defer_loading") if function.get(k) is not None})
        dumped.append({"type": "function", "function": fields})
    return dumped


def _tools_enabled(body: dict) -> bool:
    return bool(body.get("tools")) and body.get("tool_choice") != "none"


def _check_supported(body: dict) -> None:
    choice = body.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        raise InvalidRequest(
            "tool_choice 'required' or a named function is not supported in tito capture "
            "mode; use tool_choice 'auto', or a run with capture 'engine'",
            param="tool_choice",
        )
    if body.get("continue_final_message"):
        raise InvalidRequest(
            "an assistant prefill (a final assistant turn to continue) is not supported in "
            "tito capture mode; use a run with capture 'engine'",
            param="messages",
        )
    if body.get("response_format") and body["response_format"].get("type") != "text":
        raise InvalidRequest(
            "response_format is not supported in tito capture mode; use a run with capture 'engine'",
            param="response_format",
        )


def _max_tokens(body: dict, prompt_len: int, max_model_len: int | None) -> int | None:
    asked = body.get("max_completion_tokens") or body.get("max_tokens")
    room = max_model_len - prompt_len if max_model_len else None
    if room is not None and room <= 0:
        raise InvalidRequest(
            f"the prompt has {prompt_len} tokens; the engine's maximum context length is {max_model_len} tokens",
            param="messages",
        )
    if asked is None:
        return room  # completions default to 16 tokens; chat to the rest of the context
    return min(asked, room) if room is not None else asked

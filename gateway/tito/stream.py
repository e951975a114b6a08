"""The tito engine path, streamed: token ids in, chat chunks out as the tokens arrive.

The engine's ``/v1/completions`` stream (a token-list prompt, ``return_token_ids``) is turned into the
``chat.completion.chunk`` stream vLLM's chat endpoint would send, so every dialect streams a tito call
as it streams an engine-mode one: ``prompt_token_ids`` on the first chunk, then per engine chunk its
sampled ids and logprobs with the reasoning, content and tool calls they completed
(``gateway.tito.parser.StreamParser``), the finish reason, and a usage chunk. The text is decoded here
from the ids (``tokenizers``' ``DecodeStream``), as the non-streaming path decodes them, never taken
from the engine's text. The end-of-turn token is held until the next id shows it was not the last.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator

import numpy as np
from tokenizers.decoders import DecodeStream

from gateway.engine.stream import EngineStream
from gateway.errors import EngineError
from gateway.tito.parser import StreamParser
from gateway.tito.template import ModelText

USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


class TitoStream:
    """One completions stream of sampled ids, read as chat chunks (``batches``), ``close`` to abort."""

    def __init__(self, stream: EngineStream, text: ModelText, prompt_ids: np.ndarray, model: str, tools_enabled: bool):
        self._stream, self._text, self.prompt_ids = stream, text, prompt_ids
        self._parser = StreamParser(tools_enabled)
        self._decoder = DecodeStream(skip_special_tokens=False)
        self._held_eos = False  # an end-of-turn id not decoded yet (dropped when it ends the answer)
        self._output = 0  # ids sampled so far
        self._calls = 0
        self._base = {
            "id": f"chatcmpl-tito-{secrets.token_hex(8)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }

    def close(self) -> None:
        self._stream.close()

    async def batches(self) -> AsyncIterator[list[dict]]:
        yield [
            {
                **self._base,
                "prompt_token_ids": self.prompt_ids,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                ],
            }
        ]
        async for batch in self._stream.batches():
            out: list[dict] = []
            for chunk in batch:
                out += self._chunks(chunk)
            if out:
                yield out

    def _chunks(self, chunk: dict) -> list[dict]:
        choices = chunk.get("choices") or ()
        if not choices:
            return [self._usage(chunk.get("usage") or {})] if chunk.get("usage") else []
        if len(choices) != 1 or choices[0].get("index", 0) != 0:
            raise EngineError(502, "engine streamed more than one choice, expected 1")
        choice = choices[0]
        ids = choice.get("token_ids") or []
        self._output += len(ids)
        finish = choice.get("finish_reason")
        deltas = self._parser.feed(self._decoded(ids, last=finish is not None))
        if finish is not None:
            deltas += self._parser.finish()
        chunks = [self._delta(delta) for delta in deltas] or [self._delta({})]
        first = chunks[0]["choices"][0]
        first["token_ids"], first["logprobs"] = ids, {"content": _logprobs(choice.get("logprobs") or {})}
        if finish is not None:
            last = chunks[-1]["choices"][0]
            last["finish_reason"] = "tool_calls" if self._calls and finish == "stop" else finish
            last["stop_reason"] = choice.get("stop_reason")
        return chunks

    def _decoded(self, ids: list[int], last: bool) -> str:
        pieces = []
        eos = self._text.eos_id
        for token in ids:
            if self._held_eos:
                pieces.append(self._step(eos))
                self._held_eos = False
            if token == eos and eos is not None:
                self._held_eos = True
            else:
                pieces.append(self._step(token))
        return "".join(pieces)  # a held end-of-turn id left at the end is not text (as unstreamed)

    def _step(self, token: int) -> str:
        return self._decoder.step(self._text.tokenizer, token) or ""

    def _delta(self, delta: dict) -> dict:
        if "tool_call" in delta:
            delta = {"tool_calls": [{"index": self._calls, **delta["tool_call"]}]}
            self._calls += 1
        elif "reasoning" in delta:
            delta = {"reasoning_content": delta["reasoning"]}
        return {**self._base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}

    def _usage(self, usage: dict) -> dict:
        prompt = len(self.prompt_ids)
        counts = {"prompt_tokens": prompt, "completion_tokens": self._output, "total_tokens": prompt + self._output}
        return {
            **self._base,
            "choices": [],
            "usage": {**counts, **{k: v for k, v in usage.items() if k not in USAGE_COUNTS}},
        }


def _logprobs(logprobs: dict) -> list[dict]:
    """A completions chunk's logprobs as chat ``logprobs.content`` entries (as the unstreamed path)."""
    return [
        {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}
        for token, logprob in zip(logprobs.get("tokens") or [], logprobs.get("token_logprobs") or [])
    ]

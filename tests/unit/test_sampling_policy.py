"""Sampling is part of the policy: a training run's settings reach the engine on every call, whatever
the agent sends, are recorded per call, and fields that reshape the distribution are refused."""

from __future__ import annotations

import pytest

from gateway.policy.sampling import REFUSED, engine_sampling
from store.records import SamplingSettings

HI = [{"role": "user", "content": "Hi"}]
# (path under the base URL, a minimal body) per dialect
DIALECTS = {
    "chat": ("/chat/completions", {"model": "policy", "messages": HI, "max_tokens": 8}),
    "responses": ("/responses", {"model": "policy", "input": "Hi", "max_output_tokens": 8}),
    "messages": ("/messages", {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": HI}),
}
RUN_SAMPLING = {"temperature": 0.7, "top_p": 0.9}


async def call(gateway, rollout: dict | None, dialect: str, **extra):
    """One model call in ``dialect``, with the rollout's token (None: no token, the adhoc run)."""
    path, body = DIALECTS[dialect]
    prefix = f"/r/{rollout['token']}/v1" if rollout else "/v1"
    return await gateway.agent.post(prefix + path, json={**body, **extra})


async def calls_of(gateway, rollout_id: int) -> list[dict]:
    return (await gateway.http.get(f"/api/rollouts/{rollout_id}/calls")).json()["data"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_training_run_samples_with_its_settings_whatever_the_agent_sends(gateway, dialect):
    rollout = await gateway.new_rollout(run="trained", sampling=RUN_SAMPLING)
    answered = await call(gateway, rollout, dialect, temperature=0.05, top_p=0.1)

    assert answered.status_code == 200, answered.text
    sent = gateway.fake.requests[-1]
    assert (sent["temperature"], sent["top_p"]) == (0.7, 0.9)
    [recorded] = await calls_of(gateway, rollout["id"])
    assert (recorded["temperature"], recorded["top_p"]) == (0.7, 0.9)


async def test_a_run_without_sampling_settings_samples_at_the_defaults(gateway):
    rollout = await gateway.new_rollout(run="plain")
    await call(gateway, rollout, "chat", temperature=0.0)  # greedy would make the samples worthless
    assert (gateway.fake.requests[-1]["temperature"], gateway.fake.requests[-1]["top_p"]) == (1.0, 1.0)
    run = (await gateway.http.get("/api/runs/plain")).json()
    assert run["config"]["sampling"] == {"temperature": 1.0, "top_p": 1.0}


async def test_a_run_keeps_its_sampling_and_refuses_other_settings_with_a_409(gateway):
    await gateway.new_rollout(run="fixed", sampling=RUN_SAMPLING)
    await gateway.new_rollout(run="fixed", sampling={"temperature": 0.7})  # the rest is the run's
    await gateway.new_rollout(run="fixed")
    other = await gateway.http.post(
        "/api/rollouts", json={"run": "fixed", "task": "t", "sampling": {"temperature": 1.0}}
    )
    assert other.status_code == 409
    assert other.json()["error"]["param"] == "sampling" and "temperature=0.7" in other.json()["error"]["message"]


async def test_sampling_settings_are_checked(gateway):
    for bad in ({"temperature": -0.5}, {"top_p": 1.5}, {"temperature": "hot"}, {"min_p": 0.1}):
        response = await gateway.http.post("/api/rollouts", json={"run": "r", "task": "t", "sampling": bad})
        assert response.status_code == 400, bad


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_logit_bias_is_a_400_in_the_dialects_shape_in_a_training_run(gateway, dialect):
    rollout = await gateway.new_rollout(run="trained")
    engine_calls = len(gateway.fake.requests)
    refused = await call(gateway, rollout, dialect, logit_bias={"42": 100})

    assert refused.status_code == 400
    if dialect == "messages":
        assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "invalid_request_error"
        assert "logit_bias" in refused.json()["error"]["message"]
    else:
        assert refused.json()["error"]["param"] == "logit_bias"
    assert len(gateway.fake.requests) == engine_calls and await calls_of(gateway, rollout["id"]) == []


@pytest.mark.parametrize(
    "field, value",
    [
        ("min_p", 0.1),
        ("top_k", 5),
        ("repetition_penalty", 1.3),
        ("presence_penalty", 1.0),
        ("frequency_penalty", -0.5),
        ("min_tokens", 4),
        ("bad_words", ["no"]),
        ("allowed_token_ids", [1, 2]),
        ("guided_regex", "a+"),
        ("use_beam_search", True),
        ("response_format", {"type": "json_object"}),
    ],
)
async def test_fields_that_reshape_the_distribution_are_refused_in_a_training_run(gateway, field, value):
    rollout = await gateway.new_rollout(run="trained")
    refused = await call(gateway, rollout, "chat", **{field: value})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == field


async def test_a_structured_output_format_is_refused_in_the_responses_dialect(gateway):
    rollout = await gateway.new_rollout(run="trained")
    schema = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}
    refused = await call(gateway, rollout, "responses", text={"format": schema})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "response_format"


async def test_neutral_values_of_refused_fields_pass_and_stay_out_of_the_engine_request(gateway):
    rollout = await gateway.new_rollout(run="trained")
    answered = await call(
        gateway,
        rollout,
        "chat",
        presence_penalty=0,
        frequency_penalty=0.0,
        logit_bias={},
        top_k=-1,
        response_format={"type": "text"},
    )
    assert answered.status_code == 200, answered.text
    assert not set(REFUSED) & set(gateway.fake.requests[-1])


@pytest.mark.parametrize("dialect", ["chat", "responses"])
async def test_a_seed_is_left_out_of_a_training_runs_engine_requests(gateway, dialect):
    # a fixed seed would give a group's rollouts the same draws; on vLLM-CPU it can kill the engine
    rollout = await gateway.new_rollout(run="seeded", sampling=RUN_SAMPLING)
    for _ in range(2):
        answered = await call(gateway, rollout, dialect, seed=7)
        assert answered.status_code == 200, answered.text
        assert "seed" not in gateway.fake.requests[-1]


async def test_adhoc_calls_without_a_token_pass_the_clients_sampling_through(gateway):
    answered = await call(gateway, None, "chat", temperature=0.3, top_p=0.5, logit_bias={"42": 5}, min_p=0.2)
    assert answered.status_code == 200, answered.text
    sent = gateway.fake.requests[-1]
    assert (sent["temperature"], sent["top_p"], sent["logit_bias"], sent["min_p"]) == (0.3, 0.5, {"42": 5}, 0.2)
    [recorded] = (await gateway.http.get("/api/calls")).json()["data"]
    assert (recorded["temperature"], recorded["top_p"]) == (0.3, 0.5)


async def test_tito_capture_samples_with_the_runs_settings_too(tito_gateway):
    rollout = await tito_gateway.new_rollout(run="tito-run", capture="tito", sampling=RUN_SAMPLING)
    answered = await call(tito_gateway, rollout, "chat", temperature=1.9)
    assert answered.status_code == 200, answered.text
    sent = tito_gateway.fake.requests[-1]
    assert isinstance(sent["prompt"], list) and (sent["temperature"], sent["top_p"]) == (0.7, 0.9)


async def test_completions_in_a_training_run_sample_with_its_settings(gateway):
    rollout = await gateway.new_rollout(run="trained", sampling=RUN_SAMPLING)
    answered = await gateway.agent.post(
        f"/r/{rollout['token']}/v1/completions",
        json={"model": "policy", "prompt": "Hi", "max_tokens": 4, "temperature": 2},
    )
    assert answered.status_code == 200, answered.text
    assert (gateway.fake.requests[-1]["temperature"], gateway.fake.requests[-1]["top_p"]) == (0.7, 0.9)
    refused = await gateway.agent.post(
        f"/r/{rollout['token']}/v1/completions", json={"model": "policy", "prompt": "Hi", "logit_bias": {"1": 3}}
    )
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "logit_bias"


def test_engine_sampling_leaves_adhoc_bodies_alone_and_sets_a_runs_settings():
    body = {"model": "m", "temperature": 0.2, "logit_bias": {"1": 1}}
    assert engine_sampling(body, body, None) is body
    fixed = engine_sampling({"model": "m", "temperature": 0.2, "presence_penalty": 0}, {}, SamplingSettings(0.5, 1.0))
    assert fixed == {"model": "m", "temperature": 0.5, "top_p": 1.0}


def test_harnessrl_run_passes_temperature_and_top_p_as_the_new_runs_sampling(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import rollouts.launch
    from harnessrl.cli.app import app

    seen = {}

    async def launch_run(config, *args, **kwargs):
        seen["sampling"] = config.sampling.request()
        return "done"

    monkeypatch.setattr(rollouts.launch, "launch_run", launch_run)
    command = ["run", "--tasks", str(tmp_path / "t.jsonl"), "--run", "r", "--admin-key", "k"]
    assert CliRunner().invoke(app, [*command, "--temperature", "0.7"]).exit_code == 0
    assert seen["sampling"] == {"temperature": 0.7}
    assert CliRunner().invoke(app, command).exit_code == 0
    assert seen["sampling"] is None  # the run's own settings (defaults for a new run)


async def test_a_greedy_run_samples_every_call_at_temperature_zero(gateway):
    rollout = await gateway.new_rollout(run="eval-greedy", sampling={"temperature": 0.0})  # an evaluation run
    await call(gateway, rollout, "chat", temperature=0.9)
    assert gateway.fake.requests[-1]["temperature"] == 0.0

"""The call graph through the gateway: linking, forks in engine mode, side calls, samples."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import WEATHER_TOOL
from tests.fake_tokens import FakeReply


async def test_appending_turns_link_into_one_sample(gateway):
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": "hi"}]
    for turn in range(3):
        reply = await client.chat.completions.create(model="policy", messages=messages)
        messages += [
            {"role": "assistant", "content": reply.choices[0].message.content},
            {"role": "user", "content": f"and then {turn}?"},
        ]
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert [c["parent_id"] for c in calls] == [None, calls[0]["id"], calls[1]["id"]]
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert sample["input_ids"] == calls[-1]["prompt_ids"] + calls[-1]["output_ids"]
    assert sum(sample["loss_mask"]) == sum(len(c["output_ids"]) for c in calls)
    view = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert view["graph"] == {"calls": 3, "roots": 1, "forks": 0, "drift_tokens": 0}


async def test_re_rendered_tool_call_shows_as_a_fork_in_engine_mode(gateway):
    # The fake engine renders tool calls in history differently from how it sampled them,
    # as real templates and tool parsers often do.
    gateway.fake.script = [FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)), FakeReply(content="Sunny.")]
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": "weather?"}]
    first = await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert calls[1]["parent_id"] is None and calls[1]["fork_of"] == calls[0]["id"]
    assert calls[1]["drift_tokens"] > 0
    samples = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert len(samples) == 2


async def test_title_calls_are_tagged_and_left_out_of_samples(gateway):
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    await client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": "You are a title generator. Output only a short title."},
            {"role": "user", "content": "fix the failing test in utils"},
        ],
    )
    await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "fix it"}], tools=[WEATHER_TOOL]
    )
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert [c["tags"] for c in calls] == [["title"], []]
    samples = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert [s["call_ids"] for s in samples] == [[calls[1]["id"]]]


async def test_capture_mode_is_fixed_per_run(gateway):
    await gateway.new_rollout(run="tito-run", capture="tito")
    response = await gateway.http.post("/api/rollouts", json={"run": "tito-run", "task": "t", "capture": "engine"})
    assert response.status_code == 409 and "tito" in response.json()["error"]["message"]


def turns(metrics: str, harness: str) -> dict[str, float]:
    """harnessrl_turns_total by link for one harness, from the /metrics text."""
    [family] = [f for f in text_string_to_metric_families(metrics) if f.name == "harnessrl_turns"]
    return {
        s.labels["link"]: s.value
        for s in family.samples
        if s.name == "harnessrl_turns_total" and s.labels["harness"] == harness
    }


async def test_metrics_count_each_turn_by_how_it_joined_the_call_graph(gateway):
    gateway.fake.script = [
        FakeReply(content="A title"),
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="Sunny."),
        FakeReply(content="Noted."),
        FakeReply(content="Again."),
        FakeReply(content="Other."),
    ]
    rollout = await gateway.new_rollout(meta={"harness": "pi"})
    client = gateway.openai(api_key=rollout["token"])
    await client.chat.completions.create(  # side
        model="policy",
        messages=[{"role": "system", "content": "You are a title generator."}, {"role": "user", "content": "x"}],
    )
    system = {"role": "system", "content": " ".join(f"rule{n}" for n in range(80))}  # > 64 shared tokens
    messages = [system, {"role": "user", "content": "weather?"}]
    first = await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])  # first
    call = first.choices[0].message.tool_calls[0]
    messages += [
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    answer = await client.chat.completions.create(model="policy", messages=messages, tools=[WEATHER_TOOL])  # fork
    messages = [*messages, {"role": "assistant", "content": answer.choices[0].message.content}]
    await client.chat.completions.create(  # extends
        model="policy", messages=[*messages, {"role": "user", "content": "thanks"}], tools=[WEATHER_TOOL]
    )
    rewritten = [system, {"role": "user", "content": "weather in Rome?"}]  # history rewritten: false fork
    await client.chat.completions.create(model="policy", messages=rewritten, tools=[WEATHER_TOOL])
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "new"}])  # new root
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    text = (await gateway.http.get("/metrics")).text
    counted = turns(text, "pi")
    assert counted == {"side": 1, "first": 1, "fork": 1, "extends": 1, "false_fork": 1, "new_root": 1}, counted
    drift = sum(c["drift_tokens"] for c in calls)
    assert drift > 0 and f'harnessrl_drift_tokens_total{{harness="pi"}} {float(drift)}' in text

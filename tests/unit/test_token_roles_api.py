"""Token roles over REST: a call's prompt roles and a sample's roles as runs [role, start, end), null where
the store has none, and the role names in the OpenAPI schema."""

from __future__ import annotations

from store.roles import ROLE_NAMES, roles_from_runs
from tests.fake_tokens import FakeReply
from tests.role_calls import CHAT_TOOL, TOOL_RESULT, USER_TEXT, recorded
from tests.token_roles import record_chain


def whole(runs: list | None, length: int) -> bytes | None:
    return None if runs is None else roles_from_runs([tuple(r) for r in runs], length).tobytes()


async def test_a_calls_prompt_roles_are_runs_over_its_whole_prompt(gateway):
    chain = await record_chain(gateway.state.store)
    for call_id, prompt, expected in zip(chain.call_ids, chain.prompts, chain.whole_roles):
        call = (await gateway.http.get(f"/api/calls/{call_id}", params={"decode": "true"})).json()
        assert call["prompt_ids"] == prompt and whole(call["prompt_roles"], len(prompt)) == expected
    child = (await gateway.http.get(f"/api/calls/{chain.call_ids[1]}")).json()
    assert child["prompt_roles"] == [
        ["system", 0, 2], ["template", 2, 3], ["user", 3, 5], ["assistant", 5, 7], ["template", 7, 8],
        ["tool", 8, 10], ["template", 10, 11],
    ]  # fmt: skip
    listed = (await gateway.http.get(f"/api/rollouts/{chain.rollout_id}/calls")).json()["data"]
    assert [whole(c["prompt_roles"], len(c["prompt_ids"])) for c in listed] == list(chain.whole_roles)
    bare = (await gateway.http.get(f"/api/rollouts/{chain.rollout_id}/calls", params={"tokens": "false"})).json()
    assert [c["prompt_roles"] for c in bare["data"]] == [[], [], []]


async def test_a_samples_roles_cover_its_input_ids_with_assistant_on_every_sampled_token(gateway):
    chain = await record_chain(gateway.state.store)
    [sample] = (await gateway.http.get(f"/api/rollouts/{chain.rollout_id}/samples")).json()["data"]
    roles = roles_from_runs([tuple(r) for r in sample["roles"]], len(sample["input_ids"]))
    assert roles is not None and roles.tobytes()[: len(chain.prompts[2])] == chain.whole_roles[2]
    assert all(ROLE_NAMES[r] == "assistant" for r, m in zip(roles, sample["loss_mask"]) if m)
    assert sample["roles"][-1] == ["assistant", len(chain.prompts[2]), len(sample["input_ids"])]


async def test_roles_the_store_does_not_have_are_null(gateway):
    chain = await record_chain(gateway.state.store, known=(True, False, True))
    calls = [(await gateway.http.get(f"/api/calls/{i}")).json() for i in chain.call_ids]
    assert [c["prompt_roles"] is None for c in calls] == [False, True, True]
    [sample] = (await gateway.http.get(f"/api/rollouts/{chain.rollout_id}/samples")).json()["data"]
    assert sample["roles"] is None


async def test_the_openapi_schema_names_the_roles(gateway):
    schema = (await gateway.http.get("/openapi.json")).json()["components"]["schemas"]
    for model, field in (("CallDetail", "prompt_roles"), ("SampleView", "roles")):
        prop = schema[model]["properties"][field]
        run = next(option for option in prop["anyOf"] if option.get("type") == "array")["items"]
        assert run["prefixItems"][0]["enum"] == list(ROLE_NAMES) and "tool result" in prop["description"]


async def test_a_recorded_tito_conversation_reads_back_the_roles_the_gateway_recorded(tito_gateway, monkeypatch):
    """End to end: each call's roles, stored as a delta against its parent's, read back over REST equal
    the whole roles the gateway handed to the store."""
    tito_gateway.fake.script = [FakeReply(tool_calls=(("read_file", {"n": n}),)) for n in range(2)]
    tito_gateway.fake.script.append(FakeReply(content="Done."))
    records = recorded(tito_gateway, monkeypatch)
    rollout = await tito_gateway.new_rollout(run="roles-e2e", capture="tito")
    client = tito_gateway.openai(api_key=rollout["token"])
    messages = [{"role": "user", "content": USER_TEXT}]
    for n in range(3):
        reply = (await client.chat.completions.create(model="policy", messages=messages, tools=[CHAT_TOOL])).choices
        calls = [c.model_dump() for c in reply[0].message.tool_calls or []]
        messages.append({"role": "assistant", "content": reply[0].message.content, "tool_calls": calls or None})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": f"{TOOL_RESULT} #{n}"} for c in calls]
    listed = (await tito_gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    assert len(listed) == len(records) == 3 and all(c["parent_id"] for c in listed[1:])  # stored as deltas
    for call, record in zip(listed, records, strict=True):
        assert whole(call["prompt_roles"], len(call["prompt_ids"])) == record.prompt_roles
    assert any(run[0] == "tool" for run in listed[-1]["prompt_roles"])

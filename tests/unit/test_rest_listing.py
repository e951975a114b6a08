"""The viewer's REST contract: filtered keyset listings, run summaries, decoded calls, conversations, /docs."""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import pytest
from sqlalchemy import delete, select
from typer.testing import CliRunner

from harnessrl.cli.app import app as cli
from store.tables import LearnerStep, Rollout, Run
from tests.builders import call_record, gateway_settings
from tests.fake_engine import FakeReply
from tests.gateway_harness import GatewayHarness, start_gateway


@dataclass
class Seeded:
    """Two runs; alpha has 2 tasks x 2 groups x 2 rollouts, with calls of versions 0..2."""

    rollouts: list[dict]  # id, run, task, group_id, harness, status, reward, versions, calls
    call_ids: list[int]


async def seed(gateway: GatewayHarness) -> Seeded:
    store = gateway.app.state.gateway.store
    rollouts, call_ids = [], []
    for n in range(8):
        task, group = f"task-{n // 4}", f"g{(n // 2) % 2}"
        harness = ("opencode", "pi")[n % 2]
        created = await gateway.new_rollout(
            run="alpha", task=task, group=group, group_size=2, meta={"harness": harness}
        )
        versions = [n % 3, n % 3 + (n % 2)]  # a rollout's version is the lowest of its calls
        records = [
            call_record(
                created["id"],
                policy_version=v,
                tags=["title"] if k == 0 and n % 4 == 0 else [],
                finish_reason="length" if n == 5 and k == 1 else "stop",
                prompt_ids=[1, 2, 3, k],
                output_ids=[4 + k] * (k + 1),
                output_logprobs=[-0.5] * (k + 1),
                fork_of=None,
                drift_tokens=0,
            )
            for k, v in enumerate(versions)
        ]
        ids = await store.insert_calls(records)
        call_ids += ids
        status, reward = ("finished", float(n) / 4) if n < 6 else ("running", None)
        if status == "finished":
            finished = await gateway.http.post(
                f"/api/rollouts/{created['id']}/end", json={"status": status, "rewards": {"v": reward}}
            )
            assert finished.status_code == 200
        view = (await gateway.http.get(f"/api/rollouts/{created['id']}")).json()
        rollouts.append(
            dict(
                id=created["id"],
                run="alpha",
                task=task,
                group_id=view["group_id"],
                harness=harness,
                status=status,
                reward=reward,
                versions=versions,
                calls=records,
                call_ids=ids,
            )
        )
    other = await gateway.new_rollout(run="beta", task="task-0", meta={"harness": "opencode"})
    records = [call_record(other["id"], dialect="responses")]
    other_ids = await store.insert_calls(records)
    call_ids += other_ids
    rollouts.append(
        dict(
            id=other["id"],
            run="beta",
            task="task-0",
            harness="opencode",
            status="running",
            reward=None,
            versions=[0],
            calls=records,
            call_ids=other_ids,
        )
    )
    return Seeded(rollouts, call_ids)


async def get_all(gateway: GatewayHarness, path: str, limit: int = 2, **params) -> list[dict]:
    """Every item of a listing, page by page, checking that the cursors chain."""
    items, after = [], 0
    while True:
        page = await gateway.http.get(path, params={**params, "after": after, "limit": limit})
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["data"]
        assert len(body["data"]) <= limit
        if body["next_cursor"] is None:
            return items
        after = body["next_cursor"]


def ids(items: list[dict]) -> list[int]:
    return [item["id"] for item in items]


# --- runs ------------------------------------------------------------------------------------


async def test_runs_filter_by_name_substring_and_page_by_cursor(gateway):
    for name in ("exp-a", "exp-b", "other", "exp-c"):
        await gateway.new_rollout(run=name)
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=1, name="exp-")] == ["exp-a", "exp-b", "exp-c"]
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=3)] == ["exp-a", "exp-b", "other", "exp-c"]
    one = (await gateway.http.get("/api/runs/other")).json()
    assert one["name"] == "other"
    assert one["config"] == {"capture": "engine", "sampling": {"temperature": 1.0, "top_p": 1.0}}


async def test_runs_newest_first_page_by_cursor_down(gateway):
    for name in ("exp-a", "exp-b", "other", "exp-c", "exp-d"):
        await gateway.new_rollout(run=name)
    newest = ["exp-d", "exp-c", "other", "exp-b", "exp-a"]
    for limit in (1, 2, 5, 7):
        assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=limit, order="desc")] == newest
        assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=limit, order="asc")] == newest[::-1]
    first = (await gateway.http.get("/api/runs", params={"order": "desc", "limit": 2})).json()
    assert [r["name"] for r in first["data"]] == ["exp-d", "exp-c"] and first["next_cursor"] == first["data"][1]["id"]
    assert [r["name"] for r in await get_all(gateway, "/api/runs", limit=2, order="desc", name="exp-")] == [
        "exp-d",
        "exp-c",
        "exp-b",
        "exp-a",
    ]
    assert [r["name"] for r in await get_all(gateway, "/api/runs")] == newest[::-1]  # asc stays the default


async def test_runs_carry_their_rollout_counts(gateway):
    seeded = await seed(gateway)
    await gateway.new_rollout(run="beta")  # a second running rollout
    empty = await gateway.new_rollout(run="gamma")
    store = gateway.app.state.gateway.store
    async with store.sessions() as session:  # the store's rows, independently of the listing's query
        rows = (
            await session.execute(
                select(Run.name, Rollout.status, Rollout.reward, Rollout.created_at)
                .join(Run, Run.id == Rollout.run_id)
                .where(Rollout.id != empty["id"])
            )
        ).all()
        await session.execute(delete(Rollout).where(Rollout.id == empty["id"]))
        await session.commit()
    runs = {r["name"]: r for r in await get_all(gateway, "/api/runs", limit=2, order="desc")}
    assert set(runs) == {"alpha", "beta", "gamma"} and len(seeded.rollouts) == 9
    for name in ("alpha", "beta"):
        mine = [row for row in rows if row.name == name]
        rewards = [row.reward for row in mine if row.reward is not None]
        assert runs[name]["rollouts"] == len(mine)
        assert runs[name]["rollouts_finished"] == sum(row.status == "finished" for row in mine)
        assert runs[name]["reward_mean"] == (pytest.approx(statistics.mean(rewards)) if rewards else None)
        assert datetime.fromisoformat(runs[name]["last_activity"]).replace(tzinfo=None) == max(
            row.created_at for row in mine
        ).replace(tzinfo=None)
    assert (runs["alpha"]["rollouts"], runs["alpha"]["rollouts_finished"], runs["beta"]["rollouts"]) == (8, 6, 2)
    counts = ("rollouts", "rollouts_finished", "reward_mean", "last_activity")
    assert [runs["gamma"][key] for key in counts] == [0, 0, None, None]  # a run without rollouts
    one = (await gateway.http.get("/api/runs/alpha")).json()
    assert one == runs["alpha"]


async def test_unknown_things_are_404_in_openai_error_json(gateway):
    for path in (
        "/api/runs/nope",
        "/api/runs/nope/summary",
        "/api/runs/nope/steps",
        "/api/groups/99",
        "/api/rollouts/99",
        "/api/rollouts/99/calls",
        "/api/rollouts/99/conversation",
        "/api/calls/99",
    ):
        response = await gateway.http.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["type"] == "not_found_error" and response.json()["error"]["message"]


async def test_bad_parameters_are_400_in_openai_error_json(gateway):
    for path, params in (
        ("/api/rollouts", {"reward_min": 1, "reward_max": 0}),
        ("/api/rollouts", {"limit": 0}),
        ("/api/calls", {"limit": 1001}),
        ("/api/rollouts", {"policy_version": "x"}),
        ("/api/groups", {"after": -1}),
        ("/api/rollouts/1/calls", {"tokens": "maybe"}),
        ("/api/runs", {"order": "sideways"}),
    ):
        response = await gateway.http.get(path, params=params)
        assert response.status_code == 400, (path, params)
        assert response.json()["error"]["type"] == "invalid_request_error"


async def test_run_summary_matches_an_independent_count(gateway):
    seeded = await seed(gateway)
    state = gateway.app.state.gateway
    async with state.store.sessions.begin() as session:
        run_id = (await gateway.http.get("/api/runs/alpha")).json()["id"]
        session.add_all([LearnerStep(run_id=run_id, step=s, metrics={"loss": s}) for s in (1, 2, 3)])
    summary = (await gateway.http.get("/api/runs/alpha/summary")).json()

    alpha = seeded.rollouts[:-1]
    calls = [c for r in alpha for c in r["calls"]]
    rewards = [r["reward"] for r in alpha if r["reward"] is not None]
    by_version: dict[int, list] = {}
    for r in alpha:
        by_version.setdefault(min(r["versions"]), []).append(r["reward"])
    expected_versions = [
        {
            "policy_version": v,
            "rollouts": len(rs),
            "reward_mean": statistics.mean([x for x in rs if x is not None])
            if any(x is not None for x in rs)
            else None,
        }
        for v, rs in sorted(by_version.items())
    ]
    assert summary["run"] == "alpha" and summary["rollouts"] == 8
    assert summary["rollouts_by_status"] == {"finished": 6, "running": 2}
    assert summary["groups_by_status"] == {"ready": 3, "open": 1}
    assert summary["reward_mean"] == pytest.approx(statistics.mean(rewards))
    assert [
        {**v, "reward_mean": pytest.approx(v["reward_mean"]) if v["reward_mean"] is not None else None}
        for v in expected_versions
    ] == summary["reward_by_version"]
    assert summary["calls"] == len(calls) == 16
    assert summary["side_calls"] == sum(1 for c in calls if c.tags) == 2
    assert summary["roots"] == 16 and summary["forks"] == 0 and summary["fork_rate"] == 0.0
    assert summary["prompt_tokens"] == sum(len(c.prompt_ids) for c in calls)
    assert summary["output_tokens"] == sum(len(c.output_ids) for c in calls)
    assert summary["drift_tokens"] == 0 and summary["learner_steps"] == 3

    steps = await get_all(gateway, "/api/runs/alpha/steps", limit=2)
    assert [(s["step"], s["metrics"]) for s in steps] == [(1, {"loss": 1}), (2, {"loss": 2}), (3, {"loss": 3})]
    page = (await gateway.http.get("/api/runs/alpha/steps", params={"limit": 2})).json()
    assert page["next_cursor"] == 2


async def test_run_summary_counts_forks_and_drift(gateway):
    rollout = await gateway.new_rollout(run="forky")
    store = gateway.app.state.gateway.store
    [first] = await store.insert_calls([call_record(rollout["id"])])
    await store.insert_calls(
        [call_record(rollout["id"], parent_id=first), call_record(rollout["id"], fork_of=first, drift_tokens=3)]
    )
    summary = (await gateway.http.get("/api/runs/forky/summary")).json()
    assert (summary["calls"], summary["roots"], summary["forks"], summary["drift_tokens"]) == (3, 2, 1, 3)
    assert summary["fork_rate"] == pytest.approx(1 / 3)
    assert (summary["later_turns"], summary["extending_turns"]) == (2, 1) and summary["extension_rate"] == 0.5
    empty = await gateway.new_rollout(run="empty")
    await store.insert_calls([call_record(rollout["id"], tags=["title"])])  # a side call: not a turn
    titled = (await gateway.http.get("/api/runs/forky/summary")).json()
    assert (titled["calls"], titled["later_turns"], titled["extending_turns"]) == (4, 2, 1)
    empty_summary = (await gateway.http.get("/api/runs/empty/summary")).json()
    assert empty and empty_summary["fork_rate"] is None and empty_summary["extension_rate"] is None


# --- groups and rollouts -------------------------------------------------------------------


async def test_groups_filter_by_run_task_status_and_show_their_rewards_side_by_side(gateway):
    seeded = await seed(gateway)
    groups = await get_all(gateway, "/api/groups", limit=3, run="alpha")
    assert len(groups) == 4 and {g["run"] for g in groups} == {"alpha"}
    for group in groups:
        members = [r for r in seeded.rollouts if r.get("group_id") == group["id"]]
        assert group["rollouts"] == [{"id": r["id"], "status": r["status"], "reward": r["reward"]} for r in members]
    assert {g["name"] for g in await get_all(gateway, "/api/groups", run="alpha", task="task-1")} == {"g0", "g1"}
    open_groups = await get_all(gateway, "/api/groups", run="alpha", status="open")
    assert [g["task"] for g in open_groups] == ["task-1"]
    one = (await gateway.http.get(f"/api/groups/{groups[0]['id']}")).json()
    assert one == groups[0]


@pytest.mark.parametrize(
    "params, keep",
    [
        ({"run": "alpha"}, lambda r: r["run"] == "alpha"),
        ({"task": "task-1"}, lambda r: r["task"] == "task-1"),
        ({"status": "running"}, lambda r: r["status"] == "running"),
        ({"harness": "opencode"}, lambda r: r["harness"] == "opencode"),
        ({"run": "alpha", "harness": "pi"}, lambda r: r["run"] == "alpha" and r["harness"] == "pi"),
        ({"policy_version": 2}, lambda r: 2 in r["versions"]),
        ({"policy_version": 3}, lambda r: 3 in r["versions"]),
        ({"reward_min": 0.5}, lambda r: r["reward"] is not None and r["reward"] >= 0.5),
        ({"reward_max": 0.5}, lambda r: r["reward"] is not None and r["reward"] <= 0.5),
        (
            {"reward_min": 0.25, "reward_max": 0.75, "status": "finished"},
            lambda r: r["reward"] is not None and 0.25 <= r["reward"] <= 0.75,
        ),
    ],
)
async def test_rollouts_filter_by_each_field(gateway, params, keep):
    seeded = await seed(gateway)
    expected = [r["id"] for r in seeded.rollouts if keep(r)]
    assert expected  # every case selects something, and not everything
    assert ids(await get_all(gateway, "/api/rollouts", limit=2, **params)) == expected


async def test_rollouts_filter_by_group_and_carry_group_id(gateway):
    seeded = await seed(gateway)
    first = seeded.rollouts[0]
    found = await get_all(gateway, "/api/rollouts", group_id=first["group_id"])
    assert ids(found) == [r["id"] for r in seeded.rollouts if r.get("group_id") == first["group_id"]]
    assert {r["group_id"] for r in found} == {first["group_id"]} and found[0]["group"] == "g0"


# --- calls -------------------------------------------------------------------------------------


async def test_rollout_calls_without_tokens_leave_the_arrays_empty(gateway):
    seeded = await seed(gateway)
    rollout = seeded.rollouts[0]
    full = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls")).json()["data"]
    light = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tokens": "false"})).json()["data"]
    assert full[1]["prompt_ids"] == [1, 2, 3, 1] and full[1]["output_ids"] == [5, 5]
    assert full[1]["num_prompt_tokens"] == 4 and full[1]["num_output_tokens"] == 2
    for call in light:
        assert call["prompt_ids"] == call["output_ids"] == call["output_logprobs"] == []
    assert [{k: v for k, v in c.items() if k not in ("prompt_ids", "output_ids", "output_logprobs")} for c in full] == [
        {k: v for k, v in c.items() if k not in ("prompt_ids", "output_ids", "output_logprobs")} for c in light
    ]
    titles = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tag": "title"})).json()["data"]
    assert [c["tags"] for c in titles] == [["title"]]
    stops = (
        await gateway.http.get(f"/api/rollouts/{seeded.rollouts[5]['id']}/calls", params={"finish_reason": "length"})
    ).json()["data"]
    assert [c["id"] for c in stops] == [seeded.rollouts[5]["call_ids"][1]]


@pytest.mark.parametrize(
    "params, keep",
    [
        ({}, lambda r, k, c: True),
        ({"run": "beta"}, lambda r, k, c: r["run"] == "beta"),
        ({"tag": "title"}, lambda r, k, c: bool(c.tags)),
        ({"tag": "titl"}, lambda r, k, c: False),
        ({"finish_reason": "length"}, lambda r, k, c: c.finish_reason == "length"),
        ({"dialect": "responses"}, lambda r, k, c: c.dialect == "responses"),
        ({"run": "alpha", "tag": "title"}, lambda r, k, c: r["run"] == "alpha" and bool(c.tags)),
    ],
)
async def test_calls_listing_filters_and_pages(gateway, params, keep):
    seeded = await seed(gateway)
    expected = [i for r in seeded.rollouts for k, (i, c) in enumerate(zip(r["call_ids"], r["calls"])) if keep(r, k, c)]
    found = await get_all(gateway, "/api/calls", limit=3, **params)
    assert ids(found) == expected
    assert all(c["prompt_ids"] == [] for c in found)
    by_rollout = await get_all(gateway, "/api/calls", rollout_id=seeded.rollouts[1]["id"])
    assert ids(by_rollout) == seeded.rollouts[1]["call_ids"]


# --- decoding ----------------------------------------------------------------------------------


@pytest.fixture
async def decoding_gateway(sqlite_db, fake_engine, fake_engine_server, tiny_model_dir) -> AsyncIterator[GatewayHarness]:
    settings = gateway_settings(sqlite_db, fake_engine_server.url, model_dir=str(tiny_model_dir))
    async for harness in start_gateway(settings, fake_engine):
        yield harness


async def path_of_three_calls(gateway: GatewayHarness, prompt: list[int]) -> list[int]:
    """Three calls, each extending the last (prompt + output + tool output), and a side call."""
    rollout = await gateway.new_rollout()
    store = gateway.app.state.gateway.store
    outputs, tool = [[40, 41], [42], [43, 44, 45]], [50, 51]
    ids, parent, context = [], None, list(prompt)
    for version, output in enumerate(outputs):
        logprobs = [-0.25 * (version + 1) - 0.125 * j for j in range(len(output))]  # exact in float32
        [call_id] = await store.insert_calls(
            [
                call_record(
                    rollout["id"],
                    prompt_ids=context,
                    output_ids=output,
                    output_logprobs=logprobs,
                    parent_id=parent,
                    policy_version=version,
                )
            ]
        )
        ids.append(call_id)
        parent, context = call_id, context + output + tool
    await store.insert_calls(
        [call_record(rollout["id"], tags=["title"], prompt_ids=[7], output_ids=[8], output_logprobs=[-1.0])]
    )
    return ids


async def test_prompt_mask_marks_what_the_samples_train_on(gateway):
    call_ids = await path_of_three_calls(gateway, [10, 11, 12])
    leaf = (await gateway.http.get(f"/api/calls/{call_ids[-1]}", params={"decode": "true"})).json()
    [sample] = (await gateway.http.get(f"/api/rollouts/{leaf['rollout_id']}/samples")).json()["data"]
    assert sample["call_ids"] == call_ids
    assert leaf["prompt_mask"] == sample["loss_mask"][: leaf["num_prompt_tokens"]]
    assert leaf["prompt_mask"] == [0, 0, 0, 1, 1, 0, 0, 1, 0, 0]
    # The sampler's logprobs and versions where an ancestor sampled the token: the sample's, else null / -1.
    prompt_len = leaf["num_prompt_tokens"]
    assert leaf["prompt_logprobs"] == [
        lp if m else None for lp, m in zip(sample["old_logprobs"][:prompt_len], sample["loss_mask"][:prompt_len])
    ]
    assert leaf["prompt_logprobs"] == [None, None, None, -0.25, -0.375, None, None, -0.5, None, None]
    assert leaf["prompt_versions"] == sample["policy_versions"][:prompt_len] == [-1, -1, -1, 0, 0, -1, -1, 1, -1, -1]
    assert leaf["prompt_text"] is None and leaf["prompt_pieces"] is None  # the plain gateway has no tokenizer
    first = (await gateway.http.get(f"/api/calls/{call_ids[0]}", params={"decode": "true"})).json()
    assert first["prompt_mask"] == [0, 0, 0] and first["prompt_logprobs"] == [None] * 3
    assert first["prompt_versions"] == [-1] * 3
    plain = (await gateway.http.get(f"/api/calls/{call_ids[0]}")).json()
    assert plain["prompt_mask"] is None and plain["prompt_ids"] == [10, 11, 12]
    assert plain["prompt_logprobs"] is None and plain["prompt_versions"] is None


async def test_decode_gives_text_and_one_piece_per_token(decoding_gateway, tiny_model_dir):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    prompt = tokenizer.encode("<|im_start|>user\nwhat is two plus two?<|im_end|>\n", add_special_tokens=False).ids
    call_ids = await path_of_three_calls(decoding_gateway, prompt)
    call = (await decoding_gateway.http.get(f"/api/calls/{call_ids[1]}", params={"decode": "true"})).json()
    assert call["prompt_text"] == tokenizer.decode(call["prompt_ids"], skip_special_tokens=False)
    assert call["prompt_text"].startswith("<|im_start|>user\nwhat is two plus two?")
    assert call["output_text"] == tokenizer.decode(call["output_ids"], skip_special_tokens=False)
    assert len(call["prompt_pieces"]) == len(call["prompt_ids"]) and len(call["output_pieces"]) == len(
        call["output_ids"]
    )
    assert "".join(call["prompt_pieces"][: len(prompt)]) == "<|im_start|>user\nwhat is two plus two?<|im_end|>\n"
    assert call["prompt_mask"] == [0] * len(prompt) + [1, 1, 0, 0]

    samples = (
        await decoding_gateway.http.get(f"/api/rollouts/{call['rollout_id']}/samples", params={"decode": "true"})
    ).json()["data"]
    assert [len(s["pieces"]) for s in samples] == [len(s["input_ids"]) for s in samples]
    assert samples[0]["pieces"] == [tokenizer.decode([i], skip_special_tokens=False) for i in samples[0]["input_ids"]]
    undecoded = (await decoding_gateway.http.get(f"/api/rollouts/{call['rollout_id']}/samples")).json()["data"]
    assert undecoded[0]["pieces"] is None


# --- conversations -----------------------------------------------------------------------------


async def test_conversation_of_a_chat_rollout_traces_assistant_turns_to_calls(gateway):
    rollout = await gateway.new_rollout()
    client = gateway.openai(api_key=rollout["token"])
    gateway.fake.script = [
        FakeReply(tool_calls=(("get_weather", {"city": "Paris"}),)),
        FakeReply(content="It is sunny."),
        FakeReply(content="A title"),
    ]
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather in Paris?"}]
    first = await client.chat.completions.with_raw_response.create(model="policy", messages=history)
    message = first.parse().choices[0].message
    [tool_call] = message.tool_calls
    history += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": tool_call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny"},
    ]
    second = await client.chat.completions.with_raw_response.create(model="policy", messages=history)
    # A side call (title generation) after the last turn is not the conversation.
    await client.chat.completions.create(
        model="policy",
        messages=[
            {"role": "system", "content": "Generate a short title for this conversation."},
            {"role": "user", "content": "weather in Paris?"},
        ],
    )
    body = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/conversation")).json()
    first_id, second_id = (int(r.headers["x-harnessrl-call-id"]) for r in (first, second))
    assert body["rollout_id"] == rollout["id"]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "call_id": first_id,
            "tool_calls": [{"id": tool_call.id, "name": "get_weather", "arguments": tool_call.function.arguments}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": tool_call.id},
        {"role": "assistant", "content": "It is sunny.", "call_id": second_id},
    ]


async def test_conversation_of_an_anthropic_rollout_is_normalized_to_chat(gateway):
    rollout = await gateway.new_rollout(run="claude")
    gateway.fake.script = [FakeReply(content="Paris is sunny.")]
    body = {
        "model": "policy",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "You help."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather"}, {"type": "text", "text": "Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "sunny"}]},
        ],
    }
    response = await gateway.http.post("/v1/messages", json=body, headers={"x-api-key": rollout["token"]})
    assert response.status_code == 200, response.text
    call_id = int(response.headers["x-harnessrl-call-id"])
    messages = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/conversation")).json()["messages"]
    assert messages == [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "weather\nParis?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"id": "tu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "tu_1"},
        {"role": "assistant", "content": "Paris is sunny.", "call_id": call_id},
    ]
    empty = await gateway.new_rollout(run="claude")
    assert (await gateway.http.get(f"/api/rollouts/{empty['id']}/conversation")).json()["messages"] == []


# --- docs and the CLI --------------------------------------------------------------------------


async def test_docs_is_swagger_ui_from_local_assets(gateway):
    page = await gateway.http.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "cdn" not in page.text.lower()
    for asset in ("/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
        assert f'"{asset}"' in page.text or f"'{asset}'" in page.text
        assert (await gateway.http.get(asset)).status_code == 200
    schema = (await gateway.http.get("/openapi.json")).json()
    assert (
        "/api/runs/{name}/summary" in schema["paths"] and "/api/rollouts/{rollout_id}/conversation" in schema["paths"]
    )


async def test_ls_filters_like_the_rest_listings(gateway, sqlite_db):
    seeded = await seed(gateway)

    def invoke(*args):  # the CLI runs its own event loop: off this test's loop
        return asyncio.to_thread(CliRunner().invoke, cli, [*args, "--database-url", sqlite_db])

    result = await invoke(
        "ls", "rollouts", "--run", "alpha", "--harness", "pi", "--reward-min", "0.5", "--status", "finished"
    )
    shown = {
        int(line.split()[1])
        for line in result.output.splitlines()
        if line.startswith("│") and line.split()[1].isdigit()
    }
    assert result.exit_code == 0
    assert shown == {
        r["id"] for r in seeded.rollouts if r["run"] == "alpha" and r["harness"] == "pi" and (r["reward"] or 0) >= 0.5
    }
    versions = await invoke("ls", "rollouts", "--policy-version", "3")
    assert versions.exit_code == 0
    groups = await invoke("ls", "groups", "--run", "alpha", "--task", "task-1", "--status", "open")
    assert groups.exit_code == 0 and groups.output.count("task-1") == 1

    # Runs, newest first, with the counts of GET /api/runs.
    runs = await asyncio.to_thread(
        CliRunner().invoke, cli, ["ls", "runs", "--database-url", sqlite_db], env={"COLUMNS": "200"}
    )
    rows = [line.strip("│ ").split("│") for line in runs.output.splitlines() if line.startswith("│")]
    cells = {row[1].strip(): [cell.strip() for cell in row[4:7]] for row in rows if row[0].strip().isdigit()}
    assert runs.exit_code == 0 and list(cells) == ["beta", "alpha"]
    api = {r["name"]: r for r in await get_all(gateway, "/api/runs")}
    for name, (rollouts, finished, reward) in cells.items():
        assert (int(rollouts), int(finished)) == (api[name]["rollouts"], api[name]["rollouts_finished"])
        assert reward == ("" if api[name]["reward_mean"] is None else f"{api[name]['reward_mean']:.3f}")


async def test_a_demonstrations_calls_say_so_and_carry_no_sampler_logprobs(gateway):
    rollout = await gateway.new_rollout()
    store = gateway.app.state.gateway.store
    unsampled = dict(output_logprobs=None, source="demonstration")
    [parent] = await store.insert_calls([call_record(rollout["id"], prompt_ids=[1, 2], output_ids=[3, 4], **unsampled)])
    [child] = await store.insert_calls(
        [call_record(rollout["id"], prompt_ids=[1, 2, 3, 4, 5], output_ids=[6], parent_id=parent, **unsampled)]
    )
    leaf = (await gateway.http.get(f"/api/calls/{child}", params={"decode": "true"})).json()
    assert (leaf["source"], leaf["output_logprobs"]) == ("demonstration", None)
    assert leaf["prompt_mask"] == [0, 0, 1, 1, 0] and leaf["prompt_logprobs"] == [None] * 5  # sampled by nobody
    [sample] = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/samples")).json()["data"]
    assert sample["loss_mask"] == [0, 0, 1, 1, 0, 1] and sample["old_logprobs"] == [0, 0, None, None, 0, None]
    listed = (await gateway.http.get("/api/calls", params={"rollout_id": rollout["id"]})).json()["data"]
    assert [c["source"] for c in listed] == ["demonstration"] * 2
    policy = await gateway.new_rollout()
    [own] = await store.insert_calls([call_record(policy["id"])])
    assert (await gateway.http.get(f"/api/calls/{own}")).json()["source"] == "policy"

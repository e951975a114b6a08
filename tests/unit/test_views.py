"""`harnessrl ls` and `harnessrl show rollout`."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from harnessrl.cli import app


async def test_ls_and_show_render_what_was_recorded(gateway, sqlite_db):
    rollout = await gateway.new_rollout(run="views-run", task="t1", group="g", group_size=1)
    client = gateway.openai(api_key=rollout["token"])
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi there"}])
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/finish", json={"status": "finished", "rewards": {"v": 1.0}})
    def invoke(*args):  # the CLI runs its own event loop: off this test's loop
        return asyncio.to_thread(CliRunner().invoke, app, [*args, "--database-url", sqlite_db])

    runs = await invoke("ls", "runs")
    assert runs.exit_code == 0 and "views-run" in runs.output
    rollouts = await invoke("ls", "rollouts", "--run", "views-run")
    assert "finished" in rollouts.output and "1.000" in rollouts.output
    groups = await invoke("ls", "groups")
    assert "ready" in groups.output
    shown = await invoke("show", "rollout", str(rollout["id"]))
    assert shown.exit_code == 0 and "hi there" in shown.output and "Hello from the fake engine." in shown.output


def test_unknown_views_name_the_choices(sqlite_db):
    result = CliRunner().invoke(app, ["ls", "widgets", "--database-url", sqlite_db])
    assert result.exit_code == 1 and "runs, groups or rollouts" in result.output
    missing = CliRunner().invoke(app, ["show", "rollout", "999", "--database-url", sqlite_db])
    assert missing.exit_code == 1 and "not found" in missing.output


async def test_show_prints_a_tool_conversation_of_any_dialect_with_its_calls(gateway, sqlite_db):
    from gateway.engine.fake import FakeReply
    from tests.builders import WEATHER_TOOL

    gateway.fake.script = [FakeReply(tool_calls=(("get_weather", {"city": "Oslo"}),)), FakeReply(content="Cold.")]
    rollout = await gateway.new_rollout(run="views-tools", task="t1")
    client = gateway.openai(api_key=rollout["token"])
    items: list[dict] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = await client.responses.create(model="policy", input=items, tools=[{
        "type": "function", **WEATHER_TOOL["function"]}])
    [call] = first.output
    items += [call.model_dump(exclude_none=True),
              {"type": "function_call_output", "call_id": call.call_id, "output": "minus four"}]
    await client.responses.create(model="policy", input=items)
    shown = await asyncio.to_thread(CliRunner().invoke, app, ["show", "rollout", str(rollout["id"]),
                                                              "--database-url", sqlite_db])
    assert shown.exit_code == 0, shown.output
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls?tokens=false")).json()["data"]
    text = " ".join(shown.output.split())
    for expected in ("user: Weather in Oslo?", 'tool call get_weather({"city": "Oslo"})', "minus four",
                     f"[call {calls[0]['id']}]", f"assistant [call {calls[1]['id']}]: Cold.",
                     f"call {calls[1]['id']} parent None", f"fork of {calls[0]['id']}"):
        assert expected in text, (expected, shown.output)  # engine capture: the echo re-rendered, a fork

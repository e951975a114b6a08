"""`harnessrl ls` and `harnessrl show rollout`."""

from __future__ import annotations

import asyncio

from typer.testing import CliRunner

from harnessrl.cli.app import app


def table_rows(output: str) -> list[dict[str, str]]:
    """The rows of the rich table a command printed, by column header (one line per row)."""
    lines = [line for line in output.splitlines() if line.startswith(("┃", "│"))]
    cells = [[cell.strip() for cell in line.strip("┃│").split("┃" if line[0] == "┃" else "│")] for line in lines]
    header, *rows = cells
    return [dict(zip(header, row, strict=True)) for row in rows]


async def test_ls_and_show_render_what_was_recorded(gateway, sqlite_db):
    rollout = await gateway.new_rollout(run="views-run", task="t1", group="g", group_size=1)
    client = gateway.openai(api_key=rollout["token"])
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi there"}])
    await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished", "rewards": {"v": 1.0}})

    def invoke(*args):  # the CLI runs its own event loop: off this test's loop
        return asyncio.to_thread(CliRunner().invoke, app, [*args, "--database-url", sqlite_db], env={"COLUMNS": "200"})

    runs = await invoke("ls", "runs")
    assert runs.exit_code == 0
    [run] = [row for row in table_rows(runs.output) if row["name"] == "views-run"]
    assert (run["rollouts"], run["finished"], run["reward"]) == ("1", "1", "1.000")
    rollouts = await invoke("ls", "rollouts", "--run", "views-run")
    assert table_rows(rollouts.output) == [
        {
            "id": str(rollout["id"]),
            "run": "views-run",
            "task": "t1",
            "group": "g",
            "status": "finished",
            "reward": "1.000",
            "error": "",
        }
    ]
    groups = await invoke("ls", "groups", "--run", "views-run")
    [group] = table_rows(groups.output)
    assert (group["task"], group["group"], group["status"], group["size"]) == ("t1", "g", "ready", "1")
    assert group["ready"]  # the time it became ready
    shown = await invoke("show", "rollout", str(rollout["id"]))
    assert shown.exit_code == 0 and "hi there" in shown.output and "Hello from the fake engine." in shown.output


async def test_show_prints_the_verifiers_metrics_and_log_beside_the_reward(gateway, sqlite_db):
    rollout = await gateway.new_rollout(run="verified", task="t1")
    verifier = {"exit_code": 1, "metrics": {"cases_passed": 5.0}, "log": "FAILED test_median\n[x] not markup"}
    end = {"status": "finished", "rewards": {"verifier": 0.5}, "reward_details": {"verifier": verifier}}
    assert (await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json=end)).status_code == 200
    shown = await asyncio.to_thread(
        CliRunner().invoke, app, ["show", "rollout", str(rollout["id"]), "--database-url", sqlite_db]
    )
    assert shown.exit_code == 0, shown.output
    assert "verifier = 0.5" in shown.output and "exit status 1" in shown.output
    assert "cases_passed = 5" in shown.output and "FAILED test_median" in shown.output
    assert "[x] not markup" in shown.output  # the verifier's output is shown as written


async def test_show_prints_why_a_rollout_failed_and_what_its_agent_said(gateway, sqlite_db):
    rollout = await gateway.new_rollout(run="crashed", task="t1")
    end = {"status": "failed", "error": "agent exited with 2", "agent_exit_code": 2, "agent_log": "[boom] no key"}
    assert (await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json=end)).status_code == 200
    shown = await asyncio.to_thread(
        CliRunner().invoke, app, ["show", "rollout", str(rollout["id"]), "--database-url", sqlite_db]
    )
    assert shown.exit_code == 0, shown.output
    assert "error: agent exited with 2" in shown.output and "exit status 2" in shown.output
    assert "[boom] no key" in shown.output and "engine time 0.0 s" in shown.output


def test_unknown_views_name_the_choices(sqlite_db):
    result = CliRunner().invoke(app, ["ls", "widgets", "--database-url", sqlite_db])
    assert result.exit_code == 1 and "runs, groups or rollouts" in result.output
    missing = CliRunner().invoke(app, ["show", "rollout", "999", "--database-url", sqlite_db])
    assert missing.exit_code == 1 and "not found" in missing.output


async def test_show_prints_a_tool_conversation_of_any_dialect_with_its_calls(gateway, sqlite_db):
    from tests.builders import WEATHER_TOOL
    from tests.fake_engine import FakeReply

    gateway.fake.script = [FakeReply(tool_calls=(("get_weather", {"city": "Oslo"}),)), FakeReply(content="Cold.")]
    rollout = await gateway.new_rollout(run="views-tools", task="t1")
    client = gateway.openai(api_key=rollout["token"])
    items: list[dict] = [{"role": "user", "content": "Weather in Oslo?"}]
    first = await client.responses.create(
        model="policy", input=items, tools=[{"type": "function", **WEATHER_TOOL["function"]}]
    )
    [call] = first.output
    items += [
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "minus four"},
    ]
    await client.responses.create(model="policy", input=items)
    shown = await asyncio.to_thread(
        CliRunner().invoke, app, ["show", "rollout", str(rollout["id"]), "--database-url", sqlite_db]
    )
    assert shown.exit_code == 0, shown.output
    calls = (await gateway.http.get(f"/api/rollouts/{rollout['id']}/calls?tokens=false")).json()["data"]
    text = " ".join(shown.output.split())
    for expected in (
        "user: Weather in Oslo?",
        'tool call get_weather({"city": "Oslo"})',
        "minus four",
        f"[call {calls[0]['id']}]",
        f"assistant [call {calls[1]['id']}]: Cold.",
        f"call {calls[1]['id']} parent None",
        f"fork of {calls[0]['id']}",
    ):
        assert expected in text, (expected, shown.output)  # engine capture: the echo re-rendered, a fork

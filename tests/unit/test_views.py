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

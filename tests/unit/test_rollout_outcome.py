"""What a rollout's agent and engine time came to stays with the rollout once it ends."""

from __future__ import annotations

from tests.builders import chat_body


async def test_the_engine_time_of_an_ended_rollout_is_the_measured_one_not_zero(gateway):
    rollout = await gateway.new_rollout()
    # the engine takes a while: the rollout's engine time is about that (the fake's sleep and the gateway's clock
    # differ by tens of microseconds either way)
    gateway.fake.delay_s = 0.2
    reply = await gateway.agent.post(
        "/v1/chat/completions", json=chat_body(), headers={"authorization": f"Bearer {rollout['token']}"}
    )
    assert reply.status_code == 200, reply.text
    running = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()["engine_s"]
    assert running >= 0.15
    ended = await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json={"status": "finished"})
    assert ended.json()["engine_s"] == running
    assert (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()["engine_s"] == running


async def test_the_agents_exit_code_and_log_are_kept_and_shown(gateway):
    rollout = await gateway.new_rollout()
    body = {"status": "failed", "error": "agent crashed", "agent_exit_code": 137, "agent_log": "...\nKilled\n"}
    assert (await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json=body)).status_code == 200
    view = (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()
    assert (view["agent_exit_code"], view["agent_log"]) == (137, "...\nKilled\n")


async def test_an_agent_log_over_its_bound_is_refused_and_nothing_ends(gateway):
    rollout = await gateway.new_rollout()
    body = {"status": "finished", "agent_log": "x" * 20_000}
    assert (await gateway.http.post(f"/api/rollouts/{rollout['id']}/end", json=body)).status_code == 400
    assert (await gateway.http.get(f"/api/rollouts/{rollout['id']}")).json()["status"] == "running"

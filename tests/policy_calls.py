"""Helpers for tests of many policies on one gateway: publishing a policy's version, a rollout of a run
bound to a policy, one call of it, and what the store recorded of that call."""

from __future__ import annotations


async def publish_policy(gw, policy: str, version: int, status: int = 200) -> dict:
    """Publish ``<policy>-v<version>`` (the fake engine takes any path)."""
    body = {"policy": policy, "version": version, "path": f"/adapters/{policy}/v{version}"}
    response = await gw.http.post("/admin/adapters", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def policy_rollout(
    gw, run: str, run_policy: str | None = None, pin: str | None = None, task: str = "t", **extra
) -> dict:
    """A rollout of ``run`` (bound to ``run_policy`` when the run is new), pinned to ``pin`` if given."""
    body = {"run": run, "task": task, **extra}
    if run_policy:
        body["run_policy"] = run_policy
    if pin:
        body["policy"] = pin
    response = await gw.http.post("/api/rollouts", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def served_call(gw, rollout: dict, model: str = "policy") -> dict:
    """One chat call through the rollout's token (the agent's client: no admin key); its stored record."""
    response = await gw.agent.post(
        f"/r/{rollout['token']}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert response.status_code == 200, response.text
    calls = (await gw.http.get(f"/api/rollouts/{rollout['id']}/calls", params={"tokens": False})).json()["data"]
    return calls[-1]

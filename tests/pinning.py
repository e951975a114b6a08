"""Helpers for tests of pinned rollouts and evaluation results (publishing, ending rollouts)."""

from __future__ import annotations


async def publish(gw, version: int) -> None:
    """Publish policy-v{version} (the fake engine takes any path)."""
    response = await gw.http.post("/admin/adapters", json={"version": version, "path": f"/adapters/v{version}"})
    assert response.status_code == 200, response.text


async def ended_rollout(
    gw,
    policy: str | None,
    task: str,
    status: str,
    rewards: dict,
    group: str,
    run: str = "eval",
    reward_details: dict | None = None,
) -> int:
    """A rollout created (pinned when ``policy`` is given) and ended at once with these rewards."""
    body = {"run": run, "task": task, "group": group, **({"policy": policy} if policy else {})}
    created = await gw.http.post("/api/rollouts", json=body)
    assert created.status_code == 201, created.text
    end = {"status": status, "rewards": rewards, "reward_details": reward_details or {}}
    finished = await gw.http.post(f"/api/rollouts/{created.json()['id']}/end", json=end)
    assert finished.status_code == 200, finished.text
    return created.json()["id"]

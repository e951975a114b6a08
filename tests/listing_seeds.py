"""A store seeded with runs, groups, rollouts and calls of known counts, and paging through the REST listings."""

from __future__ import annotations

from dataclasses import dataclass

from tests.builders import call_record
from tests.gateway_harness import GatewayHarness


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

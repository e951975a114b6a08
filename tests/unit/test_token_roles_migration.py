"""A store written before token roles (revision 0017) upgrades and reads as before, its roles unknown."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, text

from migrations.runner import upgrade
from store.database import sqlite_url
from store.samples import build_samples
from store.store import Store

BEFORE_ROLES = "0017"


def _ids(*ids: int) -> bytes:
    return np.asarray(ids, "<i4").tobytes()


def _call(call_id: int, parent: int | None, offset: int, prompt: bytes, output: bytes) -> tuple[str, dict]:
    """A calls row as revision 0017's code wrote it (no prompt_roles column yet)."""
    return (
        "INSERT INTO calls (id, rollout_id, parent_id, drift_tokens, dialect, model, engine_model, policy, "
        "policy_version, prompt_ids, prompt_offset, output_ids, output_logprobs, source, num_prompt_tokens, "
        "num_output_tokens, finish_reason, request, response, tags, latency_ms, queue_ms, created_at) VALUES "
        "(:id, 1, :parent, 0, 'chat', 'policy', 'base', 'policy', 0, :prompt, :offset, :output, :logprobs, "
        "'policy', :n_prompt, :n_output, 'stop', '{}', '{}', '[]', 1.0, 0, '2026-12-01')",
        {
            "id": call_id, "parent": parent, "prompt": prompt, "offset": offset, "output": output,
            "logprobs": np.full(len(output) // 4, -0.5, "<f4").tobytes(), "n_prompt": offset + len(prompt) // 4,
            "n_output": len(output) // 4,
        },
    )  # fmt: skip


ROWS = [
    ("INSERT INTO runs (id, name, config, created_at) VALUES (1, 'old', '{}', '2026-12-01')", {}),
    ("INSERT INTO tasks (id, run_id, name, spec, created_at) VALUES (1, 1, 't', '{}', '2026-12-01')", {}),
    (
        "INSERT INTO groups (id, run_id, task_id, name, status, created_at) VALUES (1, 1, 1, 'g', 'open', '2026-12-01')",
        {},
    ),
    (
        "INSERT INTO rollouts (id, run_id, task_id, group_id, token, status, rewards, reward_details, meta, policy, "
        "created_at) VALUES (1, 1, 1, 1, 'hrl-old', 'finished', '{}', '{}', '{}', 'policy', '2026-12-01')",
        {},
    ),
    _call(1, None, 0, _ids(1, 2, 3), _ids(4, 5)),
    _call(2, 1, 5, _ids(6, 7), _ids(8)),  # a delta: leans on call 1's prompt + output
]


def store_before_roles(path: Path) -> str:
    url = sqlite_url(path)
    upgrade(url, BEFORE_ROLES)
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        for statement, params in ROWS:
            connection.execute(text(statement), params)
    engine.dispose()
    upgrade(url)  # what `harnessrl serve` and `harnessrl db upgrade` do
    return url


async def test_a_store_from_before_roles_reads_its_calls_with_roles_unknown(tmp_path: Path):
    store = Store.from_url(store_before_roles(tmp_path / "old.db"))
    try:
        nodes = await store.calls.nodes(1)
        assert [n.prompt_ids.tolist() for n in nodes] == [[1, 2, 3], [1, 2, 3, 4, 5, 6, 7]]
        assert [n.prompt_roles for n in nodes] == [None, None]
        [sample] = build_samples(nodes)
        assert sample.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and sample.loss_mask.tolist() == [
            0,
            0,
            0,
            1,
            1,
            0,
            0,
            1,
        ]
        assert sample.roles is None
        call = await store.calls.get(2)
        assert call.prompt_ids == [1, 2, 3, 4, 5, 6, 7] and call.prompt_roles is None
    finally:
        await store.close()

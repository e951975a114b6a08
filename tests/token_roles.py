"""Builders for token-role tests (``store.roles``): roles as bytes, and a rollout whose calls chain as
prompt deltas (a root, its child leaning on the root's prompt + output, a grandchild on the child's)."""

from __future__ import annotations

from dataclasses import dataclass

from store.records import TokenRole
from store.store import Store
from tests.builders import call_record

S, U, T, A, G = TokenRole.SYSTEM, TokenRole.USER, TokenRole.TOOL, TokenRole.ASSISTANT, TokenRole.TEMPLATE


def roles(*stretches: tuple[TokenRole, int]) -> bytes:
    """One byte per token: ``(role, count)`` stretches in order."""
    return b"".join(bytes([role]) * count for role, count in stretches)


@dataclass(frozen=True)
class Chain:
    rollout_id: int
    call_ids: tuple[int, ...]  # root, child, grandchild
    prompts: tuple[list[int], ...]  # each call's whole prompt
    outputs: tuple[list[int], ...]
    whole_roles: tuple[bytes | None, ...]  # each call's whole prompt roles as a reader must see them


# root: system, template, user | output 10, 11
# child: root's prompt + output, then template, tool result, template | output 20
# grandchild: child's prompt + output, then user
PROMPTS = ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 10, 11, 6, 7, 8, 9], [1, 2, 3, 4, 5, 10, 11, 6, 7, 8, 9, 20, 12])
OUTPUTS = ([10, 11], [20], [30, 31])
ROLES = (
    roles((S, 2), (G, 1), (U, 2)),
    roles((S, 2), (G, 1), (U, 2), (A, 2), (G, 1), (T, 2), (G, 1)),
    roles((S, 2), (G, 1), (U, 2), (A, 2), (G, 1), (T, 2), (G, 1), (A, 1), (U, 1)),
)


async def record_chain(store: Store, known: tuple[bool, bool, bool] = (True, True, True), run: str = "roles") -> Chain:
    """Three calls, each past its parent's prompt + output (stored as deltas); ``known``: which calls are
    recorded with their roles (the others with None)."""
    rollout = await store.create_rollout(run, "t")
    ids: list[int] = []
    for n, (prompt, output, whole) in enumerate(zip(PROMPTS, OUTPUTS, ROLES)):
        offset = 0 if n == 0 else len(PROMPTS[n - 1]) + len(OUTPUTS[n - 1])
        record = call_record(
            rollout.rollout_id,
            prompt_ids=prompt,
            output_ids=output,
            output_logprobs=[-0.5] * len(output),
            parent_id=ids[-1] if ids else None,
            prompt_offset=offset,
            prompt_roles=whole if known[n] else None,
        )
        [call_id] = await store.insert_calls([record])
        ids.append(call_id)
    expected = tuple(ROLES[n] if all(known[: n + 1]) else None for n in range(3))
    return Chain(rollout.rollout_id, tuple(ids), PROMPTS, OUTPUTS, expected)

"""learner.distributed outside torchrun: the row split, and the identity when not distributed
(the two-rank behaviour is tests/integration/test_learner_ddp.py)."""

from __future__ import annotations

import torch

from learner.distributed import (
    all_reduce_gradients,
    all_reduce_stats,
    shard,
    sum_over_ranks,
    world,
)
from learner.loss import LossStats


def test_shard_gives_every_item_to_exactly_one_rank_in_input_order():
    sizes = [30, 5, 64, 12, 40, 7, 64]
    items = list("abcdefg")
    parts = [shard(items, sizes, rank, 3) for rank in range(3)]
    assert sorted(x for part in parts for x in part) == items
    for part in parts:
        assert part == [x for x in items if x in part]


def test_shard_balances_tokens_largest_first():
    # 64 -> r0, 64 -> r1, 40 -> r0 (tie: lowest rank), 30 -> r1, 12 -> r1, 7 -> r0, 5 -> r1
    sizes = [64, 64, 40, 30, 12, 7, 5]
    loads = [sum(sizes[i] for i in shard(list(range(7)), sizes, rank, 2)) for rank in (0, 1)]
    assert loads == [111, 111]


def test_shard_with_more_ranks_than_items_leaves_some_ranks_empty():
    assert [shard(["x"], [3], rank, 2) for rank in (0, 1)] == [["x"], []]


def test_a_single_process_gets_everything_and_nothing_is_reduced():
    assert world() == (0, 1)
    assert shard([1, 2, 3], [1, 1, 1], *world()) == [1, 2, 3]
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    q = torch.nn.Parameter(torch.ones(2))  # no gradient: stays None
    all_reduce_gradients([p, q])
    assert p.grad.tolist() == [2.0, 2.0, 2.0] and q.grad is None
    stats = LossStats(3, 2, 0, 1, 0.5, 0.0, 1.0, 2.0, 0.9, 1.1)
    assert all_reduce_stats(stats) is stats
    assert sum_over_ranks([1, 2.5]) == [1, 2.5]

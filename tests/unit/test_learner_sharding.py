"""learner.sharding's bookkeeping, in one process: which padding rows a rank runs so that every rank of a
sharded base forwards as many rows as the busiest one, and the setting that turns sharding on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harnessrl.config.files import load_config
from learner.config import ConfigError, LearnerConfig, ParallelSettings
from learner.distributed import shard
from learner.sharding import padding_rows


@dataclass(frozen=True)
class Row:
    """What padding_rows reads of a PackedRow."""

    num_tokens: int
    num_targets: int
    num_echo_targets: int = 0  # ECHO's (tool-result tokens): a row of them alone is forwarded too

    @property
    def trains(self) -> bool:
        return self.num_targets > 0 or self.num_echo_targets > 0


def forwards(rows: list[Row], rank: int, world_size: int) -> int:
    mine = shard(rows, [r.num_tokens for r in rows], rank, world_size)
    return sum(r.trains for r in mine) + len(padding_rows(rows, rank, world_size))


@pytest.mark.parametrize("echo", [0, 7])
def test_every_rank_forwards_as_many_trained_rows_as_the_busiest(echo):
    rows = [Row(64, 10), Row(60, 5), Row(20, 3), Row(12, 2), Row(50, 0, echo), Row(30, 0)]
    for world_size in (2, 3, 4):
        counts = [forwards(rows, r, world_size) for r in range(world_size)]
        busiest = max(
            sum(r.trains for r in shard(rows, [r.num_tokens for r in rows], k, world_size)) for k in range(world_size)
        )
        assert counts == [busiest] * world_size, world_size


def test_a_rank_pads_with_the_smallest_trained_row_even_when_it_has_no_rows():
    # 2 ranks: rank 0 gets the 64, rank 1 the 30 and the untrained 8: one trained row each
    assert [padding_rows([Row(64, 10), Row(8, 0), Row(30, 4)], r, 2) for r in (0, 1)] == [[], []]
    assert [padding_rows([Row(40, 3)], r, 2) for r in (0, 1)] == [[], [Row(40, 3)]]
    # rank 0 gets the 40, rank 1 the 30 and the 9
    assert [padding_rows([Row(40, 3), Row(9, 1), Row(30, 2)], r, 2) for r in (0, 1)] == [[Row(9, 1)], []]


def test_no_padding_when_no_row_trains_a_token():
    assert padding_rows([Row(40, 0), Row(30, 0), Row(5, 0)], 1, 2) == []


def test_the_shard_setting_reads_from_toml_and_refuses_unknown_values(tmp_path):
    path = tmp_path / "learner.toml"
    path.write_text('[parallel]\nshard = "fsdp"\n')
    assert load_config(LearnerConfig, path, {}).parallel == ParallelSettings(shard="fsdp")
    assert LearnerConfig().parallel.shard == "none"
    with pytest.raises(ConfigError, match="parallel.shard"):
        LearnerConfig().updated(parallel={"shard": "fsdp2"})

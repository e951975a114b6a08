"""The harnessrl plugin for vLLM-CPU (``harnessrl.engine.vllm_cpu_lora``, a ``vllm.general_plugins``
entry point): a base-model row's adapter index -1, which vLLM-CPU's LoRA ops read as the last slot,
gets no LoRA term while every other row is computed as vLLM computes it; the generators of requests
whose prefill was cut are held out of vLLM's rewind (CPU generators have no offset)."""

from __future__ import annotations

from importlib.metadata import entry_points
from types import SimpleNamespace

import numpy as np
import torch
from vllm.lora.ops.torch_ops import lora_ops
from vllm.lora.punica_wrapper import punica_cpu

from harnessrl.engine.vllm_cpu_lora import ROW_OPS, grouped, hold_cut_generators, masked, register

SLOTS, RANK, HIDDEN = 4, 2, 6
NO_ADAPTER, FIRST = -1, 0
ROWS = torch.tensor([NO_ADAPTER, FIRST, NO_ADAPTER])


def slots() -> torch.Tensor:
    """Stacked adapter weights [slots, 1, out, in]: slot 0 and the last slot hold adapters."""
    weights = torch.zeros(SLOTS, 1, RANK, HIDDEN)
    weights[FIRST] = 1.0
    weights[-1] = 2.0  # what an adapter swapped into the last slot leaves there
    return weights


def shrink(op) -> torch.Tensor:
    output = torch.zeros(len(ROWS), RANK)
    op(torch.ones(len(ROWS), HIDDEN), slots(), output, ROWS, 1.0)
    return output


def original(name: str):
    op = getattr(lora_ops, name)
    return getattr(op, "__wrapped__", op)


def test_vllms_cpu_op_reads_no_adapter_as_the_last_slot():
    # the fault the plugin mends; when this fails, vLLM fixed it and the plugin can go
    output = shrink(original("bgmv_shrink"))
    assert output[0].tolist() == [2.0 * HIDDEN] * RANK


def test_rows_without_an_adapter_get_no_lora_term_and_the_others_theirs():
    output = shrink(masked(original("bgmv_shrink")))
    assert output[0].tolist() == output[2].tolist() == [0.0] * RANK
    assert output[1].tolist() == [1.0 * HIDDEN] * RANK

    expanded = torch.full((len(ROWS), HIDDEN), 5.0)  # the base layer's output the LoRA term adds to
    lora_b = slots().transpose(-1, -2).contiguous()  # [slots, 1, out=HIDDEN, in=RANK]
    masked(original("bgmv_expand"))(torch.ones(len(ROWS), RANK), lora_b, expanded, ROWS, True)
    assert expanded[0].tolist() == expanded[2].tolist() == [5.0] * HIDDEN
    assert expanded[1].tolist() == [5.0 + RANK] * HIDDEN


def test_the_prefill_ops_route_through_the_masked_row_ops():
    register()
    output = torch.zeros(3, RANK)
    seq_start, seq_len, indices = torch.tensor([0, 2]), torch.tensor([2, 1]), torch.tensor([NO_ADAPTER, FIRST])
    lora_ops.sgmv_shrink(torch.ones(3, HIDDEN), slots(), output, seq_start, seq_len, indices, 2, 2, 3, 1.0)
    assert output.tolist() == [[0.0] * RANK, [0.0] * RANK, [1.0 * HIDDEN] * RANK]


def test_register_patches_the_ops_vllm_cpu_calls_once_and_vllm_finds_it():
    register()
    register()
    for name in ROW_OPS:
        op = getattr(lora_ops, name)
        assert getattr(punica_cpu, name) is op
        assert not hasattr(op.__wrapped__, "__wrapped__")  # wrapped once
    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("harnessrl_cpu_lora") == "harnessrl.engine.vllm_cpu_lora:register"


class Runner:
    """What ``_bookkeeping_sync`` reads: the batch's generators and which rows' prefill was cut."""

    def __init__(self, cut: list[bool]):
        self.input_batch = SimpleNamespace(num_reqs=len(cut), generators={i: f"gen{i}" for i in range(len(cut))})
        self.discard_request_mask = SimpleNamespace(np=np.array(cut + [False] * 4))  # padded past num_reqs


def test_generators_of_cut_prefills_are_held_out_of_the_rewind_and_given_back():
    seen = []

    def bookkeeping(runner):  # vLLM rewinds every cut row's generator it finds: a CPU one raises
        cut = runner.discard_request_mask.np[: runner.input_batch.num_reqs].nonzero()[0]
        seen.append([runner.input_batch.generators.get(int(i)) for i in cut])
        seen.append(dict(runner.input_batch.generators))
        return "sampled"

    runner = Runner([True, False, True])
    assert hold_cut_generators(bookkeeping)(runner) == "sampled"
    assert seen == [[None, None], {1: "gen1"}]
    assert runner.input_batch.generators == {0: "gen0", 1: "gen1", 2: "gen2"}
    assert hold_cut_generators(hold_cut_generators(bookkeeping)).__wrapped__ is bookkeeping


def random_case(rows: int, slots: int, out: int, inp: int, indices: list[int], seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(rows, inp, generator=generator)
    weights = torch.randn(slots, 1, out, inp, generator=generator)
    return inputs, weights, torch.tensor(indices)


MIXED = [2, -1, 0, 2, 2, -1, 0, 1]  # three adapters and the base model in one batch


def test_grouped_shrink_computes_what_vllm_computes_for_every_row_with_an_adapter():
    inputs, weights, indices = random_case(len(MIXED), SLOTS, RANK, HIDDEN, MIXED)
    ours, theirs = torch.zeros(len(MIXED), RANK), torch.zeros(len(MIXED), RANK)
    grouped("bgmv_shrink", original("bgmv_shrink"))(inputs, weights, ours, indices, 0.5)
    masked(original("bgmv_shrink"))(inputs, weights, theirs, indices, 0.5)
    torch.testing.assert_close(ours, theirs)
    assert ours[1].abs().sum() == 0  # the base model's rows: no LoRA term


def test_grouped_expand_adds_or_writes_what_vllm_does_and_one_row_broadcasts():
    for add in (True, False):
        for indices in (MIXED, [1] * len(MIXED), [-1] * len(MIXED)):
            inputs, weights, idx = random_case(len(indices), SLOTS, HIDDEN, RANK, indices, seed=1)
            start = torch.randn(len(indices), HIDDEN)
            ours, theirs = start.clone(), start.clone()
            grouped("bgmv_expand", original("bgmv_expand"))(inputs, weights, ours, idx, add)
            masked(original("bgmv_expand"))(inputs, weights, theirs, idx, add)
            torch.testing.assert_close(ours, theirs)
    inputs, weights, idx = random_case(1, SLOTS, HIDDEN, RANK, [3], seed=2)
    ours, theirs = torch.zeros(4, HIDDEN), torch.zeros(4, HIDDEN)
    grouped("bgmv_expand", original("bgmv_expand"))(inputs, weights, ours, idx, True)
    original("bgmv_expand")(inputs, weights, theirs, idx, True)
    torch.testing.assert_close(ours, theirs)


def test_grouped_expand_slice_fills_its_slice_as_vllm_does():
    inputs, weights, idx = random_case(len(MIXED), SLOTS, 3, RANK, MIXED, seed=3)
    for add in (True, False):
        start = torch.randn(len(MIXED), 10)
        ours, theirs = start.clone(), start.clone()
        grouped("bgmv_expand_slice", original("bgmv_expand_slice"))(inputs, weights, ours, idx, 4, 3, add)
        masked(original("bgmv_expand_slice"))(inputs, weights, theirs, idx, 4, 3, add)
        torch.testing.assert_close(ours, theirs)


def test_grouped_rows_never_copy_an_adapters_weights_per_row():
    # vLLM-CPU's op indexes the stacked weights by row: [tokens, out, in] numbers, the cost mended here
    inputs, weights, idx = random_case(512, SLOTS, 64, 32, [1] * 512)
    indexed = []

    class Watched(torch.Tensor):
        def __getitem__(self, key):
            if isinstance(key, torch.Tensor) and key.numel() > 1:
                indexed.append(key.numel())
            return super().__getitem__(key)

    watched = weights.as_subclass(Watched)
    grouped("bgmv_shrink", original("bgmv_shrink"))(inputs, watched, torch.zeros(512, 64), idx, 1.0)
    assert indexed == []
    original("bgmv_shrink")(inputs, watched, torch.zeros(512, 64), idx, 1.0)
    assert indexed == [512]  # the per-row copy the grouped op avoids

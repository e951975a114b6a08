"""Tree packing: samples sharing a prefix forward it once, and every branch's log-probs, ratios, loss and
LoRA gradients are those of its sample forwarded alone (tiny real Qwen2 and Llama models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.forward import packed_mode
from learner.loss import LossConfig
from learner.packing import pack_samples
from learner.prefix_tree import build_tree, split_by_budget
from learner.step import StepConfig, accumulate_gradients, row_logprobs
from tests.learner_builders import VOCAB, grads, group_samples, lora_model, own_logprobs, sample_of

# --- the prefix tree ------------------------------------------------------------------------------


def test_the_prefix_tree_of_a_worked_example():
    seqs = [np.array(s) for s in ([1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 7], [1, 2, 3], [9, 9])]
    tree = build_tree(seqs, range(5))
    spans = [(n.start, n.end, n.parent, n.members) for n in tree.nodes]
    assert spans == [
        (0, 2, -1, (0, 1, 2, 3)),
        (2, 3, 0, (0, 1, 3)),
        (3, 4, 1, (0,)),
        (3, 5, 1, (1,)),
        (2, 3, 0, (2,)),
        (0, 2, -1, (4,)),
    ]
    assert tree.unique_tokens == 2 + 1 + 1 + 2 + 1 + 2
    assert tree.path(1) == [0, 1, 3] and tree.path(3) == [0, 1] and tree.ancestors(3) == [0, 1]
    assert tree.order == (3, 0, 1, 2, 4)  # depth-first; a sample ending inside comes first


def test_a_tree_too_big_for_the_budget_is_cut_into_runs_of_neighbours():
    rng = np.random.default_rng(0)
    shared = rng.integers(0, VOCAB, 30)
    seqs = [np.concatenate([shared, rng.integers(0, VOCAB, 10)]) for _ in range(5)]
    tree = build_tree(seqs, range(5))
    runs = split_by_budget(seqs, tree, budget=60)
    assert sorted(m for run in runs for m in run) == list(range(5))
    assert all(build_tree(seqs, run).unique_tokens <= 60 for run in runs)
    assert [len(r) for r in runs] == [3, 2]  # 30 + 3 x 10 fits, a fourth does not


# --- packing --------------------------------------------------------------------------------------


def test_a_group_sharing_its_prompt_packs_as_one_tree_row():
    model = lora_model()
    samples = group_samples(model, 0, n=4, prefix=40, low=5, high=9)
    [row] = pack_samples(samples, [1.0, -1.0, 0.5, -0.5], token_budget=200, min_saved_tokens=1).rows
    tails = [len(s.input_ids) - 40 for s in samples]
    assert row.is_tree and row.num_tokens == 40 + sum(tails) and row.sample_tokens == 4 * 40 + sum(tails)
    assert row.position_ids[:40].tolist() == list(range(40))
    start = 40
    for k in range(4):  # each branch continues the prefix's positions
        n = len(samples[row.sample_indices[k]].input_ids) - 40
        assert row.position_ids[start : start + n].tolist() == list(range(40, 40 + n))
        start += n
    # the first trained token of each branch is predicted by the prefix's last position
    firsts = [int(row.predictors[row.target_samples == k][0]) for k in range(4)]
    assert firsts == [39] * 4


def test_the_packer_chooses_flat_where_a_tree_saves_too_little():
    model = lora_model()
    samples = group_samples(model, 1, n=3, prefix=4, low=5, high=9)
    assert not any(r.is_tree for r in pack_samples(samples, [1.0] * 3, 200, min_saved_tokens=16).rows)
    assert all(r.is_tree for r in pack_samples(samples, [1.0] * 3, 200, min_saved_tokens=8).rows)  # saves 8
    assert not any(r.is_tree for r in pack_samples(samples, [1.0] * 3, 200, tree=False, min_saved_tokens=1).rows)


def test_a_group_bigger_than_the_budget_becomes_several_tree_rows():
    model = lora_model()
    samples = group_samples(model, 2, n=6, prefix=40, low=8, high=9)  # 40 + 8 each
    packing = pack_samples(samples, [1.0] * 6, token_budget=70, min_saved_tokens=1)
    assert len(packing.rows) == 2 and all(r.is_tree and r.num_tokens <= 70 for r in packing.rows)
    assert sorted(i for r in packing.rows for i in r.sample_indices) == list(range(6))
    assert packing.saved_tokens == 6 * 48 - 2 * (40 + 3 * 8)


# --- the property that makes tree packing correct ---------------------------------------------------


def rollout_paths(model, seed):
    """Three paths of one rollout: A = P + x, B = A + y (a longer path through A), C = P + z, their sampled
    turns trained on every path that contains them; plus an unrelated sample."""
    rng = np.random.default_rng(seed)
    p, x, y, z, other = (rng.integers(0, VOCAB, n) for n in (24, 7, 6, 9, 12))
    seqs = [np.concatenate(parts) for parts in ((p, x), (p, x, y), (p, z), (other,))]
    samples = []
    for ids in seqs:
        mask = np.zeros(len(ids), np.int8)
        mask[20:] = 1  # the prompt's last 4 tokens and every later one: shared trained tokens
        samples.append(sample_of(ids, mask, own_logprobs(model, ids) + rng.normal(0, 0.5, len(ids))))
    return samples


CASES = {
    "group": lambda m: group_samples(m, 3, n=4, prefix=30, prompt_trained=5),
    "paths": lambda m: rollout_paths(m, 4),
}


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("case", list(CASES))
def test_tree_rows_give_each_sample_its_own_logprobs(kind, case):
    model = lora_model(kind=kind, moved=True).eval()
    samples = CASES[case](model)
    packing = pack_samples(samples, [0.0] * len(samples), token_budget=300, min_saved_tokens=1)
    assert any(row.is_tree for row in packing.rows)
    alone = [own_logprobs(model, s.input_ids) for s in samples]  # each sample forwarded by itself
    with torch.no_grad(), packed_mode(model):
        for row in packing.rows:
            new, _ = row_logprobs(model, row, StepConfig())
            for k, i in enumerate(row.sample_indices):
                mine = row.target_samples == k
                want = torch.from_numpy(alone[i][row.target_offsets[mine].numpy()])
                torch.testing.assert_close(new[mine].double(), want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
@pytest.mark.parametrize("case", list(CASES))
def test_tree_and_flat_packing_take_the_same_step_in_float64(kind, case):
    model = lora_model(kind=kind, dtype=torch.float64, moved=True)
    samples = CASES[case](model)
    advantages = [float(a) for a in np.linspace(-1.0, 1.5, len(samples))]
    config = StepConfig(loss=LossConfig(beta=0.05), temperature=0.9)
    flat, _ = accumulate_gradients(model, list(pack_samples(samples, advantages, 300, tree=False).rows), config)
    want = grads(model)
    model.zero_grad(set_to_none=True)
    rows = list(pack_samples(samples, advantages, 300, min_saved_tokens=1).rows)
    assert any(r.is_tree for r in rows)
    tree, _ = accumulate_gradients(model, rows, config)
    got = grads(model)
    assert (tree.tokens_sampled, tree.tokens_trained, tree.tokens_clipped_low, tree.tokens_clipped_high) == (
        flat.tokens_sampled,
        flat.tokens_trained,
        flat.tokens_clipped_low,
        flat.tokens_clipped_high,
    )
    for name in ("loss_sum", "kl_sum", "ratio_sum", "ratio_min", "ratio_max"):
        assert getattr(tree, name) == pytest.approx(getattr(flat, name), rel=1e-9, abs=1e-12), name
    assert tree.entropy_sum == pytest.approx(flat.entropy_sum, rel=1e-6)  # a metric, summed in float32
    # transformers' RMSNorm computes in float32 even in a float64 model: a shared prefix's gradient is
    # summed over its branches through it, so gradients agree to float32 rounding (the forward is exact)
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-6 * float(want[k].abs().max()))

"""Packing: row planning, row contents, the padded layout, and packed logits == per-sample logits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.loss import token_logprobs
from learner.packing import block_causal_mask, pack_samples, pad_samples, plan_rows
from store.samples import Sample
from tests.learner_builders import tiny_base

VOCAB = 64


def make_sample(rng, length, prompt=None) -> Sample:
    prompt = int(rng.integers(1, length + 1)) if prompt is None else prompt
    ids = rng.integers(0, VOCAB, length).astype(np.int32)
    mask = np.zeros(length, np.int8)
    mask[prompt:] = 1
    old = np.where(mask == 1, -rng.random(length) * 3, 0).astype(np.float32)
    versions = np.where(mask == 1, 0, -1).astype(np.int32)
    return Sample((0,), ids, mask, old, versions)


def random_samples(seed, n, low=2, high=20):
    rng = np.random.default_rng(seed)
    return [make_sample(rng, int(rng.integers(low, high))) for _ in range(n)]


def tiny_model(kind: str, attention: str):
    return tiny_base(kind, attention).float().eval()


# --- planning -------------------------------------------------------------------------------------


def test_first_fit_decreasing_on_a_worked_example():
    # sorted: 8 (#2), 7 (#4), 5 (#0), 3 (#1), 2 (#3); 3 fits beside 7, 2 beside 8
    assert plan_rows([5, 3, 8, 2, 7], 10) == ([[2, 3], [4, 1], [0]], [])


def test_rows_respect_the_budget_and_hold_every_sample_once():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(1, 60, 200)]
    rows, refused = plan_rows(lengths, 64)
    assert refused == []
    assert sorted(i for row in rows for i in row) == list(range(200))
    assert all(sum(lengths[i] for i in row) <= 64 for row in rows)
    # first-fit decreasing stays within 11/9 OPT + 1; the volume bound is a lower bound on OPT
    assert len(rows) <= 11 / 9 * np.ceil(sum(lengths) / 64) + 1
    assert plan_rows(lengths, 64) == (rows, refused)  # deterministic


def test_samples_longer_than_the_budget_and_empty_ones_are_refused_not_truncated():
    rng = np.random.default_rng(1)
    samples = [make_sample(rng, 5), make_sample(rng, 11), make_sample(rng, 10), Sample((0,), *[np.zeros(0)] * 4)]
    packing = pack_samples(samples, [1.0, 2.0, 3.0, 4.0], token_budget=10)
    assert packing.refused == (1, 3)
    assert sorted(i for row in packing.rows for i in row.sample_indices) == [0, 2]
    assert packing.num_tokens == 15


def test_bad_budget_and_mismatched_advantages_are_errors():
    with pytest.raises(ValueError, match="token_budget"):
        plan_rows([3], 0)
    with pytest.raises(ValueError, match="advantages"):
        pack_samples(random_samples(0, 2), [1.0], 10)


def test_no_samples_give_no_rows():
    assert pack_samples([], [], 16).rows == () and pad_samples([], []).input_ids.shape == (0, 0)


# --- row contents ---------------------------------------------------------------------------------


def test_packed_rows_concatenate_samples_with_restarting_positions():
    samples = random_samples(2, 12)
    advantages = [float(a) for a in np.random.default_rng(3).normal(size=12)]
    packing = pack_samples(samples, advantages, token_budget=32)
    for row in packing.rows:
        assert not row.is_tree and row.sample_tokens == row.num_tokens <= 32
        cu = row.layout.cu_q
        assert cu[0] == 0 and cu[-1] == row.num_tokens and row.layout.kv_index is None
        for k, i in enumerate(row.sample_indices):
            s, n = samples[i], len(samples[i].input_ids)
            part = slice(int(cu[k]), int(cu[k]) + n)
            assert int(cu[k + 1]) - int(cu[k]) == n
            assert row.input_ids[part].tolist() == s.input_ids.tolist()
            assert row.position_ids[part].tolist() == list(range(n))
            mine = row.target_samples == k
            trained = np.flatnonzero(s.loss_mask.astype(bool))
            trained = trained[trained > 0]
            assert row.target_offsets[mine].tolist() == trained.tolist()
            assert row.predictors[mine].tolist() == (int(cu[k]) + trained - 1).tolist()
            assert row.targets[mine].tolist() == s.input_ids[trained].tolist()
            assert row.old_logprobs[mine].tolist() == s.old_logprobs[trained].tolist()
            assert row.advantages[mine].tolist() == pytest.approx([advantages[i]] * len(trained))
        assert row.input_ids.dtype == row.position_ids.dtype == row.predictors.dtype == torch.long


def test_the_first_token_of_a_sample_is_never_trained():
    sample = Sample(
        (0,),
        np.array([5, 6, 7], np.int32),
        np.array([1, 1, 1], np.int8),
        np.array([-1.0, -1.0, -1.0], np.float32),
        np.zeros(3, np.int32),
    )
    [row] = pack_samples([sample, sample], [1.0, 1.0], 8).rows
    assert row.target_offsets.tolist() == [1, 2, 1, 2] and row.targets.tolist() == [6, 7, 6, 7]
    assert pad_samples([sample], [1.0]).loss_mask.tolist() == [[False, True, True]]
    assert sample.loss_mask.tolist() == [1, 1, 1]  # the sample itself is untouched


def test_padded_batch_is_right_padded_with_an_attention_mask():
    samples = random_samples(4, 3)
    batch = pad_samples(samples, [0.5, -1.0, 2.0], pad_id=63)
    width = max(len(s.input_ids) for s in samples)
    assert batch.input_ids.shape == (3, width) and batch.advantages.tolist() == [0.5, -1.0, 2.0]
    for b, s in enumerate(samples):
        n = len(s.input_ids)
        assert batch.input_ids[b, :n].tolist() == s.input_ids.tolist()
        assert (batch.input_ids[b, n:] == 63).all() and (batch.attention_mask[b, n:] == 0).all()
        assert (batch.attention_mask[b, :n] == 1).all() and not batch.loss_mask[b, n:].any()


def test_block_causal_mask_matches_a_loop_over_query_key_pairs():
    positions = torch.tensor([0, 1, 2, 0, 1, 0, 0, 1, 2, 3])
    mask = block_causal_mask(positions)
    assert mask.shape == (1, 1, 10, 10)
    segment = np.cumsum(positions.numpy() == 0)
    for i in range(10):
        for j in range(10):
            allowed = j <= i and segment[i] == segment[j]
            assert (mask[0, 0, i, j].item() == 0) == allowed
            assert allowed or mask[0, 0, i, j].item() == torch.finfo(torch.float32).min


# --- the property that makes packing correct ------------------------------------------------------


@pytest.mark.parametrize("kind,attention", [("qwen2", "eager"), ("llama", "eager"), ("qwen2", "sdpa")])
def test_packed_logits_equal_per_sample_logits(kind, attention):
    model = tiny_model(kind, attention)
    samples = random_samples(5, 6, low=3, high=14)
    packing = pack_samples(samples, [1.0] * 6, token_budget=32)
    assert any(len(row.sample_indices) > 1 for row in packing.rows)
    with torch.no_grad():
        for row in packing.rows:
            packed = model(
                input_ids=row.input_ids[None],
                position_ids=row.position_ids[None],
                attention_mask=block_causal_mask(row.position_ids),
            ).logits[0]
            for k, i in enumerate(row.sample_indices):
                alone = model(input_ids=torch.from_numpy(samples[i].input_ids).long()[None]).logits[0]
                start, end = int(row.layout.cu_q[k]), int(row.layout.cu_q[k + 1])
                torch.testing.assert_close(packed[start:end], alone, atol=1e-5, rtol=1e-5)


def test_a_plain_causal_mask_would_leak_across_samples():
    model = tiny_model("qwen2", "eager")
    samples = random_samples(6, 2, low=6, high=10)
    [row] = pack_samples(samples, [1.0, 1.0], token_budget=32).rows
    length = row.num_tokens
    causal = torch.zeros(length, length).masked_fill(
        ~torch.ones(length, length, dtype=torch.bool).tril(), torch.finfo(torch.float32).min
    )[None, None]
    with torch.no_grad():
        leaky = model(input_ids=row.input_ids[None], position_ids=row.position_ids[None], attention_mask=causal).logits
        alone = model(input_ids=torch.from_numpy(samples[row.sample_indices[1]].input_ids).long()[None]).logits
    second = slice(int(row.layout.cu_q[1]), length)
    assert not torch.allclose(leaky[0, second], alone[0], atol=1e-3)


def test_packed_and_padded_batches_give_the_same_logprobs_on_trained_tokens():
    model = tiny_model("llama", "eager")
    samples = random_samples(7, 7, low=3, high=16)
    packing = pack_samples(samples, [0.0] * 7, token_budget=40)
    padded = pad_samples(samples, [0.0] * 7)
    with torch.no_grad():
        logits = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits
        want = token_logprobs(logits, padded.input_ids)
        for row in packing.rows:
            packed_logits = model(
                input_ids=row.input_ids[None],
                position_ids=row.position_ids[None],
                attention_mask=block_causal_mask(row.position_ids),
            ).logits[0]
            got = torch.log_softmax(packed_logits[row.predictors], -1).gather(-1, row.targets[:, None])[:, 0]
            sample = torch.tensor(row.sample_indices)[row.target_samples]
            assert padded.loss_mask[sample, row.target_offsets].all()
            assert int(padded.loss_mask.sum()) == sum(r.num_targets for r in packing.rows)
            torch.testing.assert_close(got, want[sample, row.target_offsets], atol=1e-5, rtol=1e-5)

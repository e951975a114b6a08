"""ECHO (``[loss] echo_weight``): a cross-entropy term on the tool-result tokens of every sample, in the same
forward as GRPO, on a tiny random Qwen2 with LoRA (peft), on CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from learner.echo import echo_mask
from learner.forward import causal_lm, chunked_token_logprobs, output_head
from learner.groups import ReadyGroup, RolloutData, build_batch
from learner.loss import LossConfig, echo_loss, token_logprobs
from learner.metrics import StepTimes, step_metrics
from learner.packing import pack_samples, pad_samples
from learner.step import StepConfig, accumulate_gradients, train_step
from store.records import TokenRole
from tests.learner_builders import adapter, grads, group_samples, lora_model, on_policy_samples, sample_of

TOOL, USER, ASSISTANT = int(TokenRole.TOOL), int(TokenRole.USER), int(TokenRole.ASSISTANT)


def with_roles(sample, tool_every: int = 2):
    """The sample with roles: sampled tokens ASSISTANT; of the others, every ``tool_every``-th TOOL (the first
    token too, which must never be a target), the rest USER."""
    roles = np.where(sample.loss_mask == 1, ASSISTANT, USER).astype(np.int8)
    prompt = np.flatnonzero(sample.loss_mask == 0)
    roles[prompt[::tool_every]] = TOOL
    roles[0] = TOOL
    return replace(sample, roles=roles)


def echo_config(weight: float, **loss) -> StepConfig:
    return StepConfig(loss=LossConfig(echo_weight=weight, **loss), max_grad_norm=0.0)


def sgd(model) -> torch.optim.Optimizer:
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)


def step_delta(model, rows, config) -> tuple[dict, dict[str, torch.Tensor]]:
    """train_step with SGD at lr 1 and no clipping: the update is minus the step's normalised gradient; the
    weights are put back as they were."""
    before = adapter(model)
    metrics = train_step(model, sgd(model), list(rows), config)
    delta = {n: before[n] - p for n, p in adapter(model).items()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in before:
                p.copy_(before[n])
    return metrics, delta


def test_echo_targets_are_the_tool_tokens_of_each_sample_but_its_first():
    model = lora_model()
    samples = [with_roles(s) for s in on_policy_samples(model, 0, n=3)]
    [row] = pack_samples(samples, [1.0] * 3, token_budget=64, tree=False, echo=True).rows
    for k, m in enumerate(row.sample_indices):
        wanted = np.flatnonzero((samples[m].roles == TOOL) & (np.arange(len(samples[m].input_ids)) > 0))
        mine = row.echo_samples == k
        assert row.echo_targets[mine].tolist() == samples[m].input_ids[wanted].tolist()
        start = sum(len(samples[j].input_ids) for j in row.sample_indices[:k])
        assert row.echo_predictors[mine].tolist() == (start + wanted - 1).tolist()
    assert row.num_echo_targets > 0 and row.trains
    # packed without echo (echo_weight 0) or without roles: no echo target at all
    assert pack_samples(samples, [1.0] * 3, token_budget=64).rows[0].num_echo_targets == 0
    unknown = [replace(s, roles=None) for s in samples]
    assert pack_samples(unknown, [1.0] * 3, token_budget=64, echo=True).rows[0].num_echo_targets == 0
    assert not echo_mask(unknown[0]).any()


def test_a_sample_without_an_advantage_packs_echo_targets_only_and_a_padded_batch_marks_them():
    model = lora_model()
    samples = [with_roles(s) for s in group_samples(model, 1, n=2)]
    [row] = pack_samples(samples, [None, 1.0], token_budget=64, tree=False, echo=True).rows
    grpo_owner = row.sample_indices[int(row.target_samples[0])]
    assert {row.sample_indices[int(k)] for k in row.target_samples} == {grpo_owner} == {1}
    assert {row.sample_indices[int(k)] for k in row.echo_samples} == {0, 1}
    padded = pad_samples(samples, [0.0, 1.0])
    for b, s in enumerate(samples):
        assert padded.echo_mask[b, : len(s.input_ids)].numpy().tolist() == echo_mask(s).tolist()
        assert not padded.echo_mask[b, len(s.input_ids) :].any()


def test_echo_loss_is_the_weighted_mean_nll_per_token_or_the_sum_over_a_given_count():
    logprobs = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)
    term, nll = echo_loss(logprobs, 0.5)
    assert term.item() == pytest.approx(0.5 * 2.0) and nll == pytest.approx(6.0)
    assert echo_loss(logprobs, 0.5, normaliser=12.0)[0].item() == pytest.approx(0.5 * 6.0 / 12.0)
    term.backward()
    assert logprobs.grad.tolist() == pytest.approx([-0.5 / 3] * 3)
    empty = echo_loss(torch.zeros(0), 1.0)[0]
    assert empty.item() == 0.0


def test_the_echo_gradient_reaches_the_logits_only_at_the_positions_that_predict_a_tool_token():
    model = lora_model(moved=True)
    samples = [with_roles(s, tool_every=3) for s in group_samples(model, 2, n=3, prefix=8)]
    padded = pad_samples(samples, [0.0] * 3)
    logits = model(input_ids=padded.input_ids, attention_mask=padded.attention_mask).logits
    logits.retain_grad()
    logprobs = token_logprobs(logits, padded.input_ids)  # temperature 1: plain NLL of the policy
    echo_loss(logprobs[padded.echo_mask], 1.0)[0].backward()
    per_position = logits.grad.abs().sum(-1)  # logits at t - 1 predict token t
    predicts_tool = torch.zeros_like(padded.echo_mask)
    predicts_tool[:, :-1] = padded.echo_mask[:, 1:]
    assert (per_position[~predicts_tool] == 0).all()
    assert (per_position[predicts_tool] > 0).all()
    # the packed row's own path: the hidden states get a gradient exactly at the echo predictors
    [row] = pack_samples(samples[:1], [None], token_budget=64, echo=True).rows
    with torch.no_grad():
        hidden = causal_lm(model)(input_ids=row.input_ids[None], output_hidden_states=True).hidden_states[-1][0]
    hidden = hidden.clone().requires_grad_()
    echoed, _ = chunked_token_logprobs(hidden[row.echo_predictors], output_head(causal_lm(model)), row.echo_targets)
    echo_loss(echoed, 1.0)[0].backward()
    predicts = torch.zeros(row.num_tokens, dtype=torch.bool)
    predicts[row.echo_predictors] = True
    assert (hidden.grad.abs().sum(-1)[~predicts] == 0).all() and (hidden.grad.abs().sum(-1)[predicts] > 0).all()


def test_echo_weight_zero_leaves_the_loss_and_every_lora_gradient_bit_for_bit():
    model = lora_model(moved=True)
    samples = group_samples(model, 3, n=4)
    advantages = [1.0, -0.5, 0.25, -0.75]
    with_tools = [with_roles(s) for s in samples]
    config = echo_config(0.0)
    before, _ = accumulate_gradients(model, list(pack_samples(samples, advantages, 96).rows), config)
    want = grads(model)
    model.zero_grad(set_to_none=True)
    # the trainer's path at weight 0: packed without echo targets, the samples' roles known
    after, _ = accumulate_gradients(model, list(pack_samples(with_tools, advantages, 96).rows), config)
    got = grads(model)
    model.zero_grad(set_to_none=True)
    assert before == after and after.echo_tokens == 0 and after.metrics()["echo_loss"] is None
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    # rows packed with echo targets but a weight of 0: the term adds exact zeros
    rows = list(pack_samples(with_tools, advantages, 96, echo=True).rows)
    zero, _ = accumulate_gradients(model, rows, config)
    assert zero.loss_sum == before.loss_sum and zero.echo_tokens > 0
    assert all(torch.equal(want[n], g) for n, g in grads(model).items())


def test_the_echo_term_is_the_weighted_mean_nll_over_every_echo_token_of_the_step_whatever_the_rows():
    model = lora_model(moved=True)
    samples = [with_roles(s) for s in on_policy_samples(model, 4, n=5)]
    weight = 0.7
    # the reference: dense logits of each sample alone, weight x the mean NLL over every tool token of them all
    nll = []
    for s in samples:
        ids = torch.from_numpy(s.input_ids.astype(np.int64))[None]
        nll.append(-token_logprobs(model(input_ids=ids).logits, ids)[0][torch.from_numpy(echo_mask(s))])
    (weight * torch.cat(nll).mean()).backward()
    want = grads(model)
    model.zero_grad(set_to_none=True)
    for budget in (16, 200):  # several rows, then one
        metrics, delta = step_delta(
            model, pack_samples(samples, [None] * 5, budget, echo=True).rows, echo_config(weight)
        )
        assert metrics["optimizer_stepped"] and metrics["tokens_trained"] == 0
        assert metrics["echo_tokens"] == sum(int(echo_mask(s).sum()) for s in samples)
        assert metrics["echo_loss"] == pytest.approx(float(torch.cat(nll).mean().detach()), rel=1e-5)
        for n, g in want.items():
            torch.testing.assert_close(delta[n], g, rtol=1e-4, atol=1e-7)


def test_grpo_and_echo_add_up_each_normalised_by_its_own_token_count():
    model = lora_model(moved=True)
    samples = [with_roles(s) for s in on_policy_samples(model, 5, n=4, noise=0.2)]
    advantages = [1.0, -1.0, 0.5, -0.5]
    config = dict(is_correction="truncate")  # every sampled token trained: the echo term is exact
    grpo_only, grpo = step_delta(model, pack_samples(samples, advantages, 16).rows, echo_config(0.0, **config))
    echo_only, echo = step_delta(
        model, pack_samples(samples, [None] * 4, 16, echo=True).rows, echo_config(0.3, **config)
    )
    both, total = step_delta(model, pack_samples(samples, advantages, 16, echo=True).rows, echo_config(0.3, **config))
    assert both["loss"] == grpo_only["loss"] and both["echo_loss"] == echo_only["echo_loss"]
    assert both["tokens_trained"] == grpo_only["tokens_trained"] and both["echo_tokens"] == echo_only["echo_tokens"]
    for n in total:
        torch.testing.assert_close(total[n], grpo[n] + echo[n], rtol=1e-4, atol=1e-7)


def zero_spread_group(model, roles: bool) -> ReadyGroup:
    samples = group_samples(model, 6, n=3)
    samples = [with_roles(s) if roles else s for s in samples]
    rollouts = tuple(RolloutData(i, 1.0, (s,)) for i, s in enumerate(samples))  # every reward equal
    return ReadyGroup(7, None, rollouts)


def test_echo_from_a_zero_spread_group_moves_the_lora_weights_while_grpo_alone_does_not():
    model = lora_model()
    group = zero_spread_group(model, roles=True)
    alone = build_batch([group], learner_version=0, max_staleness=1)
    assert alone.samples == () and alone.samples_unscored == 3
    batch = build_batch([group], learner_version=0, max_staleness=1, echo=True)
    assert batch.samples_echo_only == 3 == len(batch.samples) and batch.samples_unscored == 0
    assert all(s.advantage is None for s in batch.samples)

    def step(b, weight):
        rows = pack_samples([s.sample for s in b.samples], [s.advantage for s in b.samples], 96, echo=weight > 0)
        return step_delta(model, rows.rows, echo_config(weight))

    metrics, delta = step(alone, 0.0)
    assert not metrics["optimizer_stepped"] and all((d == 0).all() for d in delta.values())
    metrics, delta = step(batch, 1.0)
    assert metrics["optimizer_stepped"] and metrics["echo_tokens"] > 0 and metrics["tokens_sampled"] == 0
    assert any((d != 0).any() for d in delta.values())
    recorded = step_metrics(1, 0, 1e-3, batch, 0, metrics, StepTimes(1.0, 0.0, None))
    assert recorded["echo_tokens"] == metrics["echo_tokens"] and recorded["echo_loss"] > 0
    assert recorded["samples_echo_only"] == 3 and recorded["samples"] == 3


def test_samples_whose_roles_are_unknown_train_without_echo():
    model = lora_model()
    group = zero_spread_group(model, roles=False)
    batch = build_batch([group], learner_version=0, max_staleness=1, echo=True)
    assert batch.samples == () and batch.samples_unscored == 3
    spread = replace(group, rollouts=tuple(replace(r, reward=float(i)) for i, r in enumerate(group.rollouts)))
    batch = build_batch([spread], learner_version=0, max_staleness=1, echo=True)
    rows = pack_samples([s.sample for s in batch.samples], [s.advantage for s in batch.samples], 96, echo=True).rows
    assert len(batch.samples) == 3 and sum(r.num_echo_targets for r in rows) == 0
    metrics = train_step(model, sgd(model), list(rows), echo_config(1.0))
    assert metrics["echo_tokens"] == 0 and metrics["echo_loss"] is None and metrics["optimizer_stepped"]


def test_a_sample_whose_roles_do_not_match_its_tokens_is_refused():
    sample = sample_of(np.arange(5), [0, 0, 1, 1, 1], np.zeros(5))
    with pytest.raises(ValueError, match="5 tokens has 3 roles"):
        echo_mask(replace(sample, roles=np.zeros(3, np.int8)))


def test_a_tool_token_shared_in_a_tree_is_an_entry_of_each_sample_so_tree_and_flat_packing_agree():
    model = lora_model(moved=True)
    samples = [with_roles(s) for s in group_samples(model, 8, n=4, prefix=20)]  # tool tokens in the shared prompt
    tree = pack_samples(samples, [1.0, -1.0, None, 0.5], 200, min_saved_tokens=1, echo=True).rows
    flat = pack_samples(samples, [1.0, -1.0, None, 0.5], 200, tree=False, echo=True).rows
    assert tree[0].is_tree and tree[0].num_tokens < flat[0].num_tokens
    assert sum(r.num_echo_targets for r in tree) == sum(r.num_echo_targets for r in flat)
    config = echo_config(0.5, is_correction="truncate")
    tree_metrics, tree_delta = step_delta(model, tree, config)
    flat_metrics, flat_delta = step_delta(model, flat, config)
    assert tree_metrics["echo_loss"] == pytest.approx(flat_metrics["echo_loss"], rel=1e-5)
    for n in flat_delta:
        torch.testing.assert_close(tree_delta[n], flat_delta[n], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("value", [-1.0, -1e-9, float("nan"), float("inf")])
def test_the_learner_config_refuses_a_negative_or_non_finite_echo_weight_naming_the_key(value):
    from learner.config import ConfigError, LearnerConfig

    with pytest.raises(ConfigError, match=r"^loss\.echo_weight: "):
        LearnerConfig().updated(loss={"echo_weight": value})
    assert LearnerConfig().loss.echo_weight == 0.0
    assert LearnerConfig().updated(loss={"echo_weight": 0.25}).step().loss.echo_weight == 0.25


def test_a_run_trained_with_echo_gets_a_loss_plot_and_a_run_without_gets_no_note(tmp_path):
    from dataclasses import dataclass

    from harnessrl.reports.curves import PIXELS, write_report
    from store.reports import ReportData, StepPoint
    from tests.images import assert_plot_image

    @dataclass(frozen=True)
    class Point(StepPoint):  # the stored step metrics' loss and echo_loss, as store.reports reads them
        loss: float | None = None
        echo_loss: float | None = None

    def points(echo: bool) -> tuple[Point, ...]:
        return tuple(
            Point(k, 0, 0.5, 0.5, 0.0, 0, 4, 100, 1.0, loss=-0.1 * k, echo_loss=(2.0 - 0.1 * k) if echo else None)
            for k in range(1, 6)
        )

    with_echo = write_report(ReportData("r", points(True), (), None), tmp_path / "echo")
    assert "loss.png" in [p.name for p in with_echo.paths]
    assert_plot_image(tmp_path / "echo" / "loss.png", PIXELS)
    without = write_report(ReportData("r", points(False), (), None), tmp_path / "plain")
    assert "loss.png" not in [p.name for p in without.paths] and not any("loss.png" in n for n in without.notes)

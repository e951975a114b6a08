"""An idle policy's optimizer moments wait in host memory on an accelerator learner; on CPU nothing moves.

This machine has no accelerator: the moves are tested with the meta device standing in for one (its
tensors hold no data, so only where each tensor is, and what moved, is checked); tests/gpu/check.py's
``park_optimizer`` checks the real round trip on CUDA."""

import torch

from learner.parking import accelerator_of, moments, move_moments, park, unpark


def stepped_adamw() -> tuple[torch.nn.Linear, torch.optim.AdamW]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2)
    layer(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return layer, optimizer


def test_the_moments_are_the_per_weight_state_not_the_step_counts():
    _, optimizer = stepped_adamw()
    keys = sorted({key for _, key, _ in moments(optimizer)})
    assert keys == ["exp_avg", "exp_avg_sq"]
    assert sum(1 for _ in moments(optimizer)) == 4  # two moments of the weight and of the bias


def test_a_cpu_learner_parks_nothing():
    layer, optimizer = stepped_adamw()
    before = {id(t) for _, _, t in moments(optimizer)}
    assert accelerator_of(layer) is None
    assert park(optimizer, layer) == 0 and unpark(optimizer, layer) == 0
    assert {id(t) for _, _, t in moments(optimizer)} == before  # the very same tensors


def test_moving_the_moments_moves_each_once_and_leaves_the_step_counts():
    layer, optimizer = stepped_adamw()
    size = sum(t.numel() * t.element_size() for _, _, t in moments(optimizer))
    assert move_moments(optimizer, torch.device("meta")) == size  # meta stands in for an accelerator
    assert {t.device.type for _, _, t in moments(optimizer)} == {"meta"}
    assert all(state["step"].device.type == "cpu" for state in optimizer.state.values())
    assert move_moments(optimizer, torch.device("meta")) == 0  # already there: nothing moves


def test_a_model_on_an_accelerator_is_seen_by_its_trainable_weights():
    layer = torch.nn.Linear(2, 2, device="meta")
    assert accelerator_of(layer) == torch.device("meta")
    layer.requires_grad_(False)
    assert accelerator_of(layer) is None  # nothing trains: no optimizer state to park

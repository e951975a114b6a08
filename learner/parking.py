"""An idle policy's optimizer state waits in host memory, on an accelerator learner that trains several.

AdamW keeps two float32 moments per trainable weight. A rank-16 LoRA on every linear layer of a 7B base
has about 40M weights: 320 MB of moments a policy, 6.4 GB for 20 policies, all on the accelerator while
only the policy stepping needs its own. A slot of ``learner.policy_slot`` brings its moments to the
accelerator before its step and parks them in (pinned) host memory after it: 320 MB cross PCIe 4 in
about 30 ms each way, small beside a step. The step counts stay where torch keeps them (host memory,
for a non-capturable AdamW). A CPU learner's state is in host memory already: nothing moves.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

HOST = torch.device("cpu")


def accelerator_of(model: torch.nn.Module) -> torch.device | None:
    """The accelerator the model's trainable weights are on; None on a CPU learner (nothing to park)."""
    for param in model.parameters():
        if param.requires_grad:
            return None if param.device.type == "cpu" else param.device
    return None


def moments(optimizer: torch.optim.Optimizer) -> Iterator[tuple[dict, str, torch.Tensor]]:
    """The optimizer's per-weight state tensors (AdamW's ``exp_avg``, ``exp_avg_sq``): (state, key,
    tensor); the scalar step counts are left out, torch wants them where they are."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                yield state, key, value


def move_moments(optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Every moment of ``optimizer`` on ``device`` (host memory pinned when an accelerator is there,
    so the way back is a fast copy); the bytes that moved (0 when all were there)."""
    moved = 0
    pin = device.type == "cpu" and torch.cuda.is_available()
    for state, key, value in list(moments(optimizer)):
        if value.device == device:
            continue
        if pin:  # straight into pinned pages: one copy
            state[key] = torch.empty_like(value, device=device, pin_memory=True).copy_(value)
        else:  # from pinned pages the copy runs on the stream, ahead of the step that reads it
            state[key] = value.to(device, non_blocking=True)
        moved += value.numel() * value.element_size()
    return moved


def park(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> int:
    """After a policy's step: its moments to host memory, on an accelerator learner; bytes moved."""
    return move_moments(optimizer, HOST) if accelerator_of(model) is not None else 0


def unpark(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> int:
    """Before a policy's step: its moments back beside its weights; bytes moved."""
    device = accelerator_of(model)
    return move_moments(optimizer, device) if device is not None else 0

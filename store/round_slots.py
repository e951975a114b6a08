"""The slots of a run's round that rollout workers lease (``store.leases``): each task times
``range(group_size)``, their rollouts made in one group. A record free of SQL, so the gateway's client
(``contracts.gateway_client``) names the slots it claims as the store does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RoundSlots:
    run: str
    round: int  # the run's round, from 0
    group: str  # the group the round's rollouts are created in (e.g. "r0")
    tasks: Sequence[str]  # task names, in the order the round plays them
    group_size: int  # slots per task: indices 0 to group_size - 1


__all__ = ["RoundSlots"]

"""Fair turns between policies: round robin over the policies that have a ready batch.

A step trains one policy's batch. After policy P steps, the next step goes to the first policy after P
(in the order they joined) that has a batch ready, so a policy whose groups become ready waits at most
one step of each other policy, never behind another's backlog.
"""

from __future__ import annotations


class Turns:
    """Whose step is next (mutable: it remembers who stepped last)."""

    def __init__(self) -> None:
        self.order: list[str] = []  # policies (their runs) in the order they joined
        self.last: str | None = None

    def join(self, name: str) -> None:
        if name not in self.order:
            self.order.append(name)

    def next(self, ready: set[str]) -> str | None:
        """The first of ``ready`` after the one that stepped last, going round; None when none is ready."""
        if not ready:
            return None
        start = self.order.index(self.last) + 1 if self.last in self.order else 0
        rotated = self.order[start:] + self.order[:start]
        pick = next((name for name in rotated if name in ready), None)
        if pick is not None:
            self.last = pick
        return pick

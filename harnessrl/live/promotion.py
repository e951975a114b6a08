"""The promotion gate: a version serves live keys only once a held-out evaluation shows it no worse
than the version it would replace, within a margin.

The evaluation is the project's own (``harnessrl eval --policies ada@vOLD,ada@vNEW``, or ``base`` for
version 0), of the live run's own policy: both versions on the same held-out tasks, k rollouts each;
its eval.json is what the gate reads. A candidate that fails is kept (its adapter stays published, a
later gate may pass it) and the reason is printed and kept in the run's history; a rollback to any earlier version needs no gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.passk import policy_label
from store.policies import DEFAULT_POLICY

METRICS = ("pass_at_k", "pass_at_1")


@dataclass(frozen=True)
class Decision:
    promote: bool
    why: str  # kept in the run's history when it promotes; printed either way


def gate(
    document: dict,
    incumbent: int,
    candidate: int,
    margin: float = 0.0,
    metric: str = "pass_at_k",
    policy: str = DEFAULT_POLICY,
) -> Decision:
    """Promote ``policy``'s ``candidate`` over its ``incumbent`` when eval.json's ``metric`` of it is at
    least the incumbent's minus ``margin``; ValueError when the document does not hold both on the same tasks."""
    if metric not in METRICS:
        raise ValueError(f"--metric is one of {', '.join(METRICS)}, not {metric!r}")
    rows = {row["policy"]: row for row in document.get("policies", [])}
    old_label, new_label = policy_label(incumbent, policy), policy_label(candidate, policy)
    missing = [label for label in (old_label, new_label) if label not in rows or rows[label].get(metric) is None]
    if missing:
        raise ValueError(
            f"the evaluation has no {metric} of {' and '.join(missing)}: run `harnessrl eval --policies "
            f"{old_label},{new_label}` on held-out tasks and pass its eval.json"
        )
    old, new = rows[old_label][metric], rows[new_label][metric]
    k = document.get("k")
    measured = (
        f"{metric} {new:.3f} for {new_label} vs {old:.3f} for {old_label} "
        f"(run {document.get('run')!r}, {len(document.get('tasks', []))} tasks, k={k}, margin {margin:g})"
    )
    if new >= old - margin:
        return Decision(True, f"passed the gate: {measured}")
    return Decision(False, f"kept, not promoted: {measured}")

"""What `harnessrl eval` shows: the terminal table, the final table and the PNG of eval.json."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from store.passk import PolicyResult


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def live_table(run: str, results: list[PolicyResult], done: int, total: int, k: int) -> Table:
    """Per policy, from the results so far (a pass: reward >= 1)."""
    table = Table(title=f"harnessrl eval: run {run!r}  {done}/{total} rollouts")
    for column in ("policy", "rollouts", "passed", "pass@1", f"pass@{k}", "mean reward", "95% interval", "failures"):
        table.add_column(column, justify="right")
    for r in results:
        name = r.label if r.version >= 0 else "teacher"  # teachers: negative keys (evaluation)
        table.add_row(
            name,
            str(r.n),
            str(r.passed),
            _pct(r.pass_at_1),
            _pct(r.pass_at_k),
            _num(r.reward.mean),
            f"{_num(r.reward.low)} – {_num(r.reward.high)}",
            str(r.failures),
        )
    return table


def final_tables(document: dict) -> list[Table]:
    """The per-policy table and the per-task successes of eval.json (the store's numbers)."""
    policies = document["policies"]
    summary = Table(
        title=f"run {document['run']!r}: {len(document['tasks'])} tasks × k={document['k']}, "
        f"harness {document['harness']} (from the store)"
    )
    for column in (
        "policy",
        "tasks",
        "rollouts",
        "passed",
        "pass@1",
        "pass@k",
        "k",
        "mean reward",
        "95% interval",
        "failures",
    ):
        summary.add_column(column, justify="right")
    for row in policies:
        name = row["policy"] if row["asked"] == row["policy"] else f"{row['asked']} ({row['policy']})"
        summary.add_row(
            name,
            str(row["tasks"]),
            str(row["rollouts"]),
            str(row["passed"]),
            _pct(row["pass_at_1"]),
            _pct(row["pass_at_k"]),
            str(row["k"]),
            _num(row["reward_mean"]),
            f"{_num(row['reward_low'])} – {_num(row['reward_high'])}",
            str(row["failures"]),
        )
    per_task = Table(title="successes per task")
    per_task.add_column("task")
    labels = [row["policy"] for row in policies]
    for label in labels:
        per_task.add_column(label, justify="right")
    for row in document["per_task"]:
        cells = [row["policies"].get(label) for label in labels]
        per_task.add_row(row["task"], *("" if c is None else f"{c['passed']}/{c['rollouts']}" for c in cells))
    return [summary, per_task, *_metrics_table(policies)]


def _metrics_table(policies: list[dict]) -> list[Table]:
    """The verifier's metrics (reward.json's numbers beside the reward), mean per policy; none without."""
    names = sorted({name for row in policies for name in row.get("metrics") or {}})
    if not names:
        return []
    table = Table(title="verifier metrics (mean over finished rollouts; never part of the reward)")
    table.add_column("policy")
    for name in names:
        table.add_column(name, justify="right")
    for row in policies:
        table.add_row(row["policy"], *(_num((row.get("metrics") or {}).get(name)) for name in names))
    return [table]


def save_eval_png(document: dict, path: Path) -> Path:
    """pass@1 and pass@k per policy beside mean reward with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = document["policies"]
    labels = [row["policy"] for row in rows]
    positions = range(len(rows))
    figure, (rates, rewards) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.38
    rates.bar([p - width / 2 for p in positions], [row["pass_at_1"] or 0 for row in rows], width, label="pass@1")
    rates.bar(
        [p + width / 2 for p in positions],
        [row["pass_at_k"] or 0 for row in rows],
        width,
        label=f"pass@{document['k']}",
    )
    rates.set_xticks(list(positions), labels)
    rates.set_ylim(0, 1)
    rates.set_title("pass rates")
    rates.legend()
    means = [row["reward_mean"] or 0 for row in rows]
    errors = [
        [m - (row["reward_low"] if row["reward_low"] is not None else m) for m, row in zip(means, rows)],
        [(row["reward_high"] if row["reward_high"] is not None else m) - m for m, row in zip(means, rows)],
    ]
    rewards.bar(list(positions), means, yerr=errors, capsize=6, color="tab:green")
    rewards.set_xticks(list(positions), labels)
    rewards.set_title("mean reward (95% interval)")
    figure.suptitle(f"{document['run']}: {len(document['tasks'])} tasks, k={document['k']}, {document['harness']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

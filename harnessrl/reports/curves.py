"""`harnessrl report`: a run's training curves as PNG files (matplotlib, Agg: no display needed).

One figure per question: is the reward rising (per learner step, per policy version), how old is
the data the learner trains on (staleness), how fast do the engine and the learner go (generation
and training throughput). A figure without data (no learner steps yet, no calls) is skipped with
a note saying why, never drawn empty. A run trained with ECHO (``[loss] echo_weight``) also gets ``loss.png``:
GRPO's loss and ECHO's per step. A run warm-started by `quickstart --warm-start` (its warm-up
run ``<run>-warmup`` exists) also gets ``warm_start.png``: the phases side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from store.passk import PolicyResult
from store.reports import ReportData

SIZE_IN = (8.0, 4.5)  # figure size, inches
DPI = 110  # -> 880 x 495 pixels; fixed (no tight bounding box) so every plot has the same size
PIXELS = (int(SIZE_IN[1] * DPI), int(SIZE_IN[0] * DPI))  # (height, width) as image arrays hold them
BLUE, ORANGE, GREY = "#1f77b4", "#ff7f0e", "#b0b0b0"


@dataclass(frozen=True)
class ReportResult:
    paths: tuple[Path, ...]  # PNG files written
    notes: tuple[str, ...]  # why a plot was left out


def write_report(
    data: ReportData, out_dir: Path, held_out: Sequence[PolicyResult] = (), warm_up: ReportData | None = None
) -> ReportResult:
    """Draw every plot the data allows into ``out_dir``; ``held_out``: the run's held-out evaluations
    per version (the run ``<run>-eval``, see harnessrl.evaluation.periodic); ``warm_up``: its warm-up run
    (``<run>-warmup``, see harnessrl.training.warm_start)."""
    _agg()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, notes = [], []
    plots = _plots(data)
    if any(p.echo_loss is not None for p in data.steps):  # only runs trained with ECHO: no note for the others
        plots.append(("loss", lambda fig: _losses(fig, data), None))
    if held_out:  # only runs evaluated with eval_every have it: no note for the others
        plots.append(("eval_per_version", lambda fig: _held_out(fig, held_out), None))
    if warm_up is not None:
        missing = None if warm_up.versions else f"warm-up run {warm_up.run!r} has no scored rollouts"
        plots.append(("warm_start", lambda fig: _warm_start(fig, warm_up, data), missing))
    for name, draw, missing in plots:
        if missing:
            notes.append(f"{name}.png skipped: {missing}")
            continue
        paths.append(_save(draw, data.run, out_dir / f"{name}.png"))
    return ReportResult(tuple(paths), tuple(notes))


def _plots(data: ReportData) -> list[tuple[str, Callable, str | None]]:
    """(file name, drawing function, reason it cannot be drawn or None)."""
    no_steps = (
        None
        if data.steps
        else (f"run {data.run!r} has no learner steps yet (start the learner: `harnessrl train --run {data.run}`)")
    )
    no_calls = None if data.generation else f"run {data.run!r} has no recorded calls"
    no_rewards = None if data.versions else f"run {data.run!r} has no scored rollouts with calls"
    return [
        ("reward_per_step", lambda fig: _reward_per_step(fig, data), no_steps),
        ("reward_per_version", lambda fig: _reward_per_version(fig, data), no_rewards),
        ("staleness", lambda fig: _staleness(fig, data), no_steps),
        ("generation_throughput", lambda fig: _generation(fig, data), no_calls),
        ("training_throughput", lambda fig: _training(fig, data), no_steps),
        ("train_inference_mismatch", lambda fig: _mismatch(fig, data), _no_mismatch(data)),
    ]


def _no_mismatch(data: ReportData) -> str | None:
    if any(p.mismatch_mean_abs is not None for p in data.steps):
        return None
    return (
        f"run {data.run!r} has no step that compared tokens its own version sampled yet (the mismatch is "
        f"measured on those only)"
    )


def _agg() -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: works without a display, in CI and over ssh


def _save(draw: Callable, run: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=SIZE_IN, dpi=DPI)
    try:
        draw(figure)
        figure.text(0.995, 0.005, f"run {run}", ha="right", va="bottom", fontsize=7, color="grey")
        figure.tight_layout(rect=(0, 0.02, 1, 1))
        figure.savefig(path, dpi=DPI)
    finally:
        plt.close(figure)
    return path


def _reward_per_step(figure, data: ReportData) -> None:
    ax = figure.add_subplot()
    steps = [p.step for p in data.steps]
    ax.plot(
        steps, [_nan(p.reward_mean) for p in data.steps], color=BLUE, marker=_marker(steps), label="all scored rollouts"
    )
    # Always dotted: once the policy solves most tasks few steps keep a group, and a value between
    # two gaps would draw no line at all.
    ax.plot(
        steps,
        [_nan(p.reward_mean_kept) for p in data.steps],
        color=ORANGE,
        marker=".",
        alpha=0.8,
        label="groups with a learning signal (reward std > 0)",
    )
    ax.set(xlabel="learner step", ylabel="mean reward of the step's groups", title="reward per learner step")
    _finish(ax)


def _reward_per_version(figure, data: ReportData) -> None:
    ax = figure.add_subplot()
    counts = ax.twinx()  # rollout counts behind the means, so a mean over 3 rollouts reads as such
    versions = [v.version for v in data.versions]
    counts.bar(
        versions, [v.rollouts for v in data.versions], color=GREY, alpha=0.35, width=0.8, label="rollouts (right axis)"
    )
    counts.set_ylabel("rollouts", color="grey")
    counts.tick_params(axis="y", colors="grey")
    ax.set_zorder(counts.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.errorbar(
        versions,
        [v.reward_mean for v in data.versions],
        yerr=[v.stderr for v in data.versions],
        color=BLUE,
        marker="o",
        markersize=4,
        capsize=2,
        label="mean reward ± standard error",
    )
    ax.set(
        xlabel="policy version (0 = base model)",
        ylabel="mean reward",
        title="reward per policy version (a rollout counts for the version of its first call)",
    )
    ax.xaxis.get_major_locator().set_params(integer=True)
    handles = ax.get_legend_handles_labels()[0] + counts.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="best", fontsize=8)
    ax.grid(alpha=0.3)


def _held_out(figure, results: Sequence[PolicyResult]) -> None:
    ax = figure.add_subplot()
    versions = [r.version for r in results]
    ax.plot(versions, [_nan(r.pass_at_1) for r in results], color=BLUE, marker="o", label="pass@1")
    ks = sorted({r.k for r in results})
    ax.plot(
        versions,
        [_nan(r.pass_at_k) for r in results],
        color=ORANGE,
        marker="o",
        label=f"pass@k (k = {', '.join(map(str, ks))})",
    )
    means = [_nan(r.reward.mean) for r in results]
    low = [_nan(r.reward.low) for r in results]
    high = [_nan(r.reward.high) for r in results]
    ax.fill_between(versions, low, high, color=GREY, alpha=0.3, label="mean reward, 95% interval")
    ax.plot(versions, means, color="black", linewidth=0.8, linestyle="--")
    tasks = max(r.tasks for r in results)
    ax.set(
        xlabel="policy version (0 = base model)",
        ylabel="held-out score",
        title=f"held-out evaluation per policy version ({tasks} tasks, pinned rollouts)",
    )
    ax.set_ylim(bottom=min(0.0, *[x for x in low if x == x]), top=max(1.0, *[x for x in high if x == x]))
    _finish(ax)


def warm_up_reward(warm_up: ReportData) -> tuple[int, float]:
    """(rollouts, mean reward) of the whole warm-up run, every version together."""
    rollouts = sum(v.rollouts for v in warm_up.versions)
    return rollouts, sum(v.reward_mean * v.rollouts for v in warm_up.versions) / max(1, rollouts)


def warm_start_lines(warm_up: ReportData, data: ReportData) -> list[str]:
    """The phases as text: the warm-up run's reward, then the GRPO run's per version."""
    rollouts, mean = warm_up_reward(warm_up)
    lines = [f"warm-up ({warm_up.run}): {rollouts} rollouts, mean reward {mean:.3f}"]
    for index, v in enumerate(data.versions):
        what = "sft" if index == 0 and v.version > 0 else "grpo"
        lines.append(f"{what} v{v.version} ({data.run}): {v.rollouts} rollouts, mean reward {v.reward_mean:.3f}")
    return lines


def _warm_start(figure, warm_up: ReportData, data: ReportData) -> None:
    """The warm-up run's mean reward, then the GRPO run's per policy version (the first: SFT's)."""
    ax = figure.add_subplot()
    rollouts, mean = warm_up_reward(warm_up)
    ax.bar([0], [mean], color=ORANGE, alpha=0.7, width=0.6, label=f"warm-up ({rollouts} rollouts)")
    versions = data.versions
    xs = list(range(2, len(versions) + 2))  # a gap after the warm-up's bar: its label and v1's stay apart
    ax.errorbar(
        xs,
        [v.reward_mean for v in versions],
        yerr=[v.stderr for v in versions],
        color=BLUE,
        marker="o",
        markersize=4,
        capsize=2,
        label="GRPO run, mean reward ± standard error per version",
    )
    if versions:
        ax.axvline(1.0, color=GREY, linestyle="--", label=f"SFT on the warm-up's successes -> v{versions[0].version}")
    every = max(1, len(versions) // 12)  # at most ~12 version labels: more overlap
    shown = [(x, f"v{v.version}") for x, v in zip(xs, versions) if (x - 2) % every == 0]
    ax.set_xticks([0, *[x for x, _ in shown]], ["warm-up", *[label for _, label in shown]], fontsize=8)
    ax.set(
        xlabel="phase / policy version",
        ylabel="mean reward",
        ylim=(-0.02, 1.02),
        title="warm start: warm-up run, SFT, then GRPO",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _staleness(figure, data: ReportData) -> None:
    ax = figure.add_subplot()
    steps = [p.step for p in data.steps]
    most = [_nan(p.staleness_max) for p in data.steps]
    # The max as a shaded band under the mean's line: over many steps two crossing lines are unreadable.
    ax.fill_between(steps, most, step="mid", color=ORANGE, alpha=0.25, label="max")
    ax.step(steps, most, where="mid", color=ORANGE, linewidth=0.8)
    ax.plot(steps, [_nan(p.staleness_mean) for p in data.steps], color=BLUE, marker=_marker(steps), label="mean")
    ax.set(
        xlabel="learner step",
        ylabel="policy versions behind the learner",
        title="staleness of the samples each step trained on",
    )
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(bottom=0)
    _finish(ax)


def _generation(figure, data: ReportData) -> None:
    ax = figure.add_subplot()
    gen = data.generation
    ax.step(gen.minutes, gen.tokens_per_min, where="post", color=BLUE)
    ax.fill_between(gen.minutes, gen.tokens_per_min, step="post", color=BLUE, alpha=0.15)
    total = sum(gen.tokens)
    ax.set(
        xlabel="minutes since the run's first call",
        ylabel="sampled output tokens / min",
        title=f"generation throughput ({total:,} tokens in {sum(gen.calls):,} calls, {gen.bucket_s} s buckets)",
    )
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)


def _training(figure, data: ReportData) -> None:
    rate, samples = figure.subplots(2, 1, sharex=True)
    steps = [p.step for p in data.steps]
    # Steps that trained nothing (every group zero-std or stale) say nothing about speed: left out
    # here, and visible as zero samples below.
    rate.plot(
        steps,
        [p.trained_tokens_per_s if p.tokens_trained else float("nan") for p in data.steps],
        color=BLUE,
        marker="o",
        markersize=3,
        linestyle="none",
    )
    rate.set(
        ylabel="trained tokens / s",
        title="training throughput (tokens the loss covered / step time, steps that trained)",
    )
    rate.set_ylim(bottom=0)
    rate.grid(alpha=0.3)
    samples.bar(steps, [p.samples for p in data.steps], color=ORANGE, width=0.8)
    samples.set(xlabel="learner step", ylabel="samples / step")
    samples.xaxis.get_major_locator().set_params(integer=True)
    samples.grid(alpha=0.3, axis="y")


def _mismatch(figure, data: ReportData) -> None:
    ax = figure.add_subplot()
    points = [p for p in data.steps if p.mismatch_mean_abs is not None]
    steps = [p.step for p in points]
    ax.plot(steps, [p.mismatch_mean_abs for p in points], color=BLUE, marker=_marker(steps), label="mean |Δ| per token")
    ax.plot(steps, [_nan(p.mismatch_max_abs) for p in points], color=ORANGE, marker=".", alpha=0.8, label="max |Δ|")
    alarmed = [p for p in points if p.mismatch_alarmed]
    if alarmed:
        ax.scatter([p.step for p in alarmed], [p.mismatch_mean_abs for p in alarmed], color="red", zorder=3,
                   label=f"steps over the alarm ({len(alarmed)})")  # fmt: skip
    ax.set_yscale("symlog", linthresh=1e-6)  # fp32 engines sit near 1e-7, bf16 near 1e-2: both readable
    ax.set(
        xlabel="learner step",
        ylabel="|learner - sampler| log-prob (nats)",
        title="train/inference mismatch (tokens sampled by the learner's own version)",
    )
    _finish(ax)


def _losses(figure, data: ReportData) -> None:
    """GRPO's loss and ECHO's (mean NLL per tool-result token, [loss] echo_weight), one panel each."""
    grpo, echo = figure.subplots(2, 1, sharex=True)
    steps = [p.step for p in data.steps]
    grpo.plot(steps, [_nan(p.loss) for p in data.steps], color=BLUE, marker=".")
    grpo.set(ylabel="GRPO loss", title="losses per learner step (ECHO: the tool results' NLL, before its weight)")
    grpo.grid(alpha=0.3)
    echo.plot(steps, [_nan(p.echo_loss) for p in data.steps], color=ORANGE, marker=".")
    echo.set(xlabel="learner step", ylabel="ECHO loss (nats / tool token)")
    echo.xaxis.get_major_locator().set_params(integer=True)
    echo.grid(alpha=0.3)


def _finish(ax) -> None:
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _marker(points: list) -> str | None:
    """Dots on a few points show where the data is; on many they only blur the line."""
    return "." if len(points) <= 40 else None


def _nan(value) -> float:
    """Matplotlib leaves a gap at NaN; None (a step that did not report the value) becomes one."""
    return float("nan") if value is None else float(value)

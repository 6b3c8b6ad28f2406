"""The two PNG plots: img/s and efficiency against rank count, on axes that keep their scale.

Points are means of launches, bars their 95 % intervals. An axis is sized to the points and the
ideal, not to the widest bar: a bar that runs past the axis is cut there and marked with an
arrow and its true end, so one noisy point cannot flatten the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench import stats
from bench.report.summary import ScalingPoint, series

EFFICIENCY_TOP = (1.2, 2.0)  # the efficiency axis ends between these, whatever the bars say
CAPTION = "points: mean of launches; bars: 95 % interval; arrow: bar cut at the axis"


@dataclass(frozen=True)
class Bar:
    """One error bar drawn within [bottom, top]; `cut_low`/`cut_high` hold the true ends cut."""

    low: float
    high: float
    cut_low: float | None = None
    cut_high: float | None = None


def clip_bar(value: float, interval: stats.Interval, bottom: float, top: float) -> Bar:
    if not interval.defined:  # no bar: the point alone, cut at the axis like a bar would be
        interval = stats.Interval(value, value)
    low = min(max(interval.low, bottom), top)
    high = max(min(interval.high, top), bottom)
    return Bar(
        low,
        high,
        interval.low if interval.low < bottom else None,
        interval.high if interval.high > top else None,
    )


def efficiency_axis(points: Sequence[ScalingPoint]) -> tuple[float, float]:
    """0 to a little above the highest point, at least 1.2 (ideal is 1), at most 2."""
    values = [p.efficiency for p in points if not math.isnan(p.efficiency)]
    lowest, highest = EFFICIENCY_TOP
    return 0.0, min(highest, max([lowest, *(v * 1.1 for v in values)]))


def throughput_axis(points: Sequence[ScalingPoint]) -> tuple[float, float]:
    """0 to a little above the highest point or ideal."""
    values = [p.throughput for p in points if not math.isnan(p.throughput)]
    values += [_ideal(p, points) for p in points]
    values = [v for v in values if not math.isnan(v)]
    return 0.0, 1.25 * max(values) if values else 1.0


def _ideal(p: ScalingPoint, points: Sequence[ScalingPoint]) -> float:
    base = next(
        (b for b in points if (b.launcher, b.variant, b.gpus) == (p.launcher, p.variant, 1)), None
    )
    return math.nan if base is None else base.throughput * p.ideal_speedup


def _draw(
    ax: Any,
    series: Sequence[ScalingPoint],
    attr: str,
    ci: str,
    limits: tuple[float, float],
    colour: str,
    name: str,
    index: int,
) -> None:
    xs = [p.gpus for p in series]
    ys = [getattr(p, attr) for p in series]
    bars = [clip_bar(y, getattr(p, ci), *limits) for p, y in zip(series, ys, strict=True)]
    shown = [min(max(y, limits[0]), limits[1]) for y in ys]
    err = [
        [max(0.0, s - b.low) for s, b in zip(shown, bars, strict=True)],
        [max(0.0, b.high - s) for s, b in zip(shown, bars, strict=True)],
    ]
    ax.errorbar(xs, shown, yerr=err, marker="o", capsize=3, color=colour, label=name)
    for x, y, bar in zip(xs, ys, bars, strict=True):
        for end, edge, marker in ((bar.cut_high, limits[1], "^"), (bar.cut_low, limits[0], "v")):
            if end is None:
                continue
            point = "" if limits[0] <= y <= limits[1] else f"point {y:,.2f}, "
            ax.plot([x], [edge], marker=marker, color=colour, markersize=9, clip_on=False)
            ax.annotate(
                f"{point}bar to {end:,.2f}",
                (x, edge),
                textcoords="offset points",
                xytext=(-8, -12 - 10 * index),
                ha="right",
                fontsize=7,
                color=colour,
            )


def _finish(ax: Any, points: Sequence[ScalingPoint], ylabel: str, title: str, path: Path) -> None:
    """Axes, labels, caption and legend of a scaling plot, written to `path`."""
    cpu = any(p.cpu for p in points)
    counts = sorted({p.gpus for p in points})
    if counts:
        ax.set_xticks(counts)
        ax.margins(x=0.08)
    ax.set_xlabel("CPU ranks (on the same host's cores)" if cpu else "GPUs")
    ax.set_ylabel(ylabel)
    ax.set_title(title + ("\nCPU SMOKE TEST: NOT GPU RESULTS" if cpu else ""))
    ax.grid(True, alpha=0.3)
    ax.figure.text(0.01, 0.01, CAPTION, fontsize=7, color="dimgrey")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no successful runs", ha="center", va="center", transform=ax.transAxes)
    ax.figure.tight_layout(rect=(0, 0.03, 1, 1))
    ax.figure.savefig(path, dpi=120)
    plt.close(ax.figure)


def plot_throughput(points: Sequence[ScalingPoint], path: Path) -> tuple[float, float]:
    """img/s (mean of launches) per series with its ideal; returns the y-axis limits."""
    _, ax = plt.subplots(figsize=(7, 4.5))
    limits = throughput_axis(points)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    cpu = any(p.cpu for p in points)
    for i, (key, measured) in enumerate(series(points, "throughput").items()):
        colour = colours[i % len(colours)]
        _draw(ax, measured, "throughput", "throughput_ci", limits, colour, f"{key[0]} {key[1]}", i)
        ideal = [(p.gpus, _ideal(p, points)) for p in measured if not math.isnan(_ideal(p, points))]
        if len(ideal) > 1:
            what = "1-rank img/s x cores used / cores at 1 rank" if cpu else "N x 1-GPU img/s"
            ax.plot(
                *zip(*ideal, strict=True),
                "--",
                color=colour,
                alpha=0.5,
                label=f"ideal ({key[0]}: {what})",
            )
    ax.set_ylim(*limits)
    _finish(ax, points, "images/s (mean of launches)", "Training throughput", path)
    return limits


def plot_efficiency(points: Sequence[ScalingPoint], path: Path) -> tuple[float, float]:
    """Efficiency vs the ideal per series with the allreduce ceiling; returns the y-axis limits."""
    _, ax = plt.subplots(figsize=(7, 4.5))
    limits = efficiency_axis(points)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal (100 %)")
    for i, (key, measured) in enumerate(series(points, "efficiency").items()):
        colour = colours[i % len(colours)]
        _draw(ax, measured, "efficiency", "efficiency_ci", limits, colour, f"{key[0]} {key[1]}", i)
        capped = [p for p in measured if not math.isnan(p.comm_ceiling)]
        if len(capped) > 1:
            ceiling = [min(p.comm_ceiling, limits[1]) for p in capped]
            ax.plot(
                [p.gpus for p in capped],
                ceiling,
                ":",
                color=colour,
                marker="^",
                label=f"allreduce ceiling ({key[0]})",
            )
    ax.set_ylim(*limits)
    _finish(ax, points, "efficiency = speed-up / ideal speed-up", "Scaling efficiency", path)
    return limits

"""The arithmetic of scaling results: small pure functions, each unit-tested.

Definitions used throughout:
- throughput = images in the timed window / wall time of that window, never a mean of per-step
  rates (which overweights fast steps). With several ranks the window is the slowest rank's:
  every rank must finish its steps before the global batch is done.
- speed-up(N) = T(N) / T(1); efficiency(N) = T(N) / (N * T(1)).
- confidence intervals: percentile bootstrap over the repeats (independent launches), which
  say how well the mean is known, unlike the +- spread of windows some harnesses print.
- epoch time model: T(N) = a + b / N; `a` is the time per epoch that does not shrink with GPUs.
- allreduce bandwidth as nccl-tests defines it: algbw = bytes / time,
  busbw = algbw * 2(n-1)/n (what each link carries in a ring).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def throughput(images: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"window must be positive, got {seconds}")
    return images / seconds


def slowest_window(rank_windows_s: Sequence[float]) -> float:
    """The timed window of a multi-rank run: bounded by its slowest rank."""
    return max(rank_windows_s)


def slowest_rank_steps(rank_step_times: Sequence[Sequence[float]]) -> list[float]:
    """Per step, the longest time any rank took (ranks in a synchronous step wait for it)."""
    lengths = {len(steps) for steps in rank_step_times}
    if len(lengths) != 1:
        raise ValueError(f"ranks timed different numbers of steps: {sorted(lengths)}")
    return [max(step) for step in zip(*rank_step_times, strict=True)]


def rank_imbalance(rank_windows_s: Sequence[float]) -> float:
    """Slowest / fastest rank window - 1 (0 = perfectly even)."""
    return max(rank_windows_s) / min(rank_windows_s) - 1.0


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def speedup(throughput_n: float, throughput_1: float) -> float:
    return throughput_n / throughput_1


def efficiency(throughput_n: float, gpus: int, throughput_1: float) -> float:
    return throughput_n / (gpus * throughput_1)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


def bootstrap_ci(
    samples: Sequence[float],
    statistic: Callable[[np.ndarray], np.ndarray] = lambda x: x.mean(axis=-1),
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of `statistic` (applied along the last axis) of `samples`."""
    data = np.asarray(samples, dtype=float)
    if data.size == 0:
        return Interval(math.nan, math.nan)
    rng = np.random.default_rng(seed)
    draws = data[rng.integers(0, data.size, size=(resamples, data.size))]
    values = statistic(draws)
    tail = (1.0 - confidence) / 2.0 * 100.0
    return Interval(float(np.percentile(values, tail)), float(np.percentile(values, 100.0 - tail)))


def efficiency_ci(
    throughputs_n: Sequence[float],
    gpus: int,
    throughputs_1: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Bootstrap interval of mean T(N) / (N * mean T(1)), resampling both sets of repeats.

    At N = 1 the efficiency is 1 by definition, so the interval is the point (1, 1).
    """
    if gpus == 1:
        return Interval(1.0, 1.0)
    n = np.asarray(throughputs_n, dtype=float)
    one = np.asarray(throughputs_1, dtype=float)
    if n.size == 0 or one.size == 0:
        return Interval(math.nan, math.nan)
    rng = np.random.default_rng(seed)
    mean_n = n[rng.integers(0, n.size, size=(resamples, n.size))].mean(axis=1)
    mean_1 = one[rng.integers(0, one.size, size=(resamples, one.size))].mean(axis=1)
    values = mean_n / (gpus * mean_1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    return Interval(float(np.percentile(values, tail)), float(np.percentile(values, 100.0 - tail)))


@dataclass(frozen=True)
class EpochModel:
    """T(N) = fixed_s + scalable_s / N seconds per epoch."""

    fixed_s: float
    scalable_s: float

    def seconds(self, gpus: int) -> float:
        return self.fixed_s + self.scalable_s / gpus


def fit_epoch_model(gpus: Sequence[int], epoch_s: Sequence[float]) -> EpochModel:
    """Least-squares fit of T(N) = a + b/N (exact through two points)."""
    if len(set(gpus)) < 2:
        raise ValueError("need epoch times for at least two different GPU counts")
    design = np.column_stack([np.ones(len(gpus)), 1.0 / np.asarray(gpus, dtype=float)])
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(epoch_s, dtype=float), rcond=None)
    return EpochModel(float(a), float(b))


def epoch_seconds(dataset_size: int, images_per_s: float) -> float:
    return dataset_size / images_per_s


def algbw(nbytes: float, seconds: float) -> float:
    """Bytes per second one allreduce of `nbytes` achieves (nccl-tests' algbw)."""
    return nbytes / seconds


def busbw(algbw_value: float, ranks: int) -> float:
    """Per-link bandwidth of a ring allreduce: algbw * 2(n-1)/n (nccl-tests' busbw)."""
    return algbw_value * 2.0 * (ranks - 1) / ranks


def allreduce_seconds(nbytes: float, algbw_value: float) -> float:
    return nbytes / algbw_value


def comm_ceiling(step_compute_s: float, allreduce_s: float) -> float:
    """Best possible efficiency if the gradient allreduce overlaps the backward pass perfectly.

    A step can never be shorter than its compute or its communication.
    """
    return step_compute_s / max(step_compute_s, allreduce_s)


def comm_serial_estimate(step_compute_s: float, allreduce_s: float) -> float:
    """Efficiency if the allreduce did not overlap compute at all (a pessimistic estimate)."""
    return step_compute_s / (step_compute_s + allreduce_s)


def flop_bound_images_per_s(peak_flops: float, flops_per_image: float) -> float:
    """No GPU trains faster than its peak FLOP/s over the FLOPs one image costs."""
    return peak_flops / flops_per_image

"""The arithmetic of scaling results: small pure functions, each unit-tested.

Definitions used throughout:
- throughput = images in the timed window / wall time of that window, never a mean of per-step
  rates (which overweights fast steps). With several ranks the window is the slowest rank's:
  every rank must finish its steps before the global batch is done.
- speed-up(N) = T(N) / T(1); efficiency(N) = speed-up / ideal speed-up, where the ideal is
  N on GPUs and the ratio of cores used on CPU (ranks x threads per rank).
- a configuration's figure is the mean over its launches (independent repeats); its 95 %
  interval is a Student-t interval of that mean (coverage checked by simulation in the tests),
  undefined for a single launch. Ratios of means (efficiency) carry both sets' uncertainty
  through the delta method.
- epoch time model: T(N) = a + b / N; `a` is the time per epoch that does not shrink with GPUs.
- allreduce bandwidth as nccl-tests defines it: algbw = bytes / time,
  busbw = algbw * 2(n-1)/n (what each link carries in a ring).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats


def throughput(images: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"window must be positive, got {seconds}")
    return images / seconds


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


def efficiency(throughput_n: float, ideal_speedup: float, throughput_1: float) -> float:
    """Speed-up over the ideal one: N on N GPUs, the ratio of cores used for CPU ranks."""
    return throughput_n / (ideal_speedup * throughput_1)


@dataclass(frozen=True)
class Interval:
    """A confidence interval; NaN ends mean "not defined" (e.g. a single launch)."""

    low: float
    high: float

    @property
    def defined(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))


NO_INTERVAL = Interval(math.nan, math.nan)

# Named in the report beside every interval it prints.
MEAN_METHOD = "Student-t interval of the mean over launches"
RATIO_METHOD = "delta method on log(mean(N) / mean(1)) with Welch-Satterthwaite degrees of freedom"


def t_quantile(confidence: float, df: float) -> float:
    """t such that P(|T| < t) = confidence for Student's t with `df` degrees of freedom.

    `df` may be real: the Welch-Satterthwaite df of a ratio of two sets of launches is not an
    integer, and the quantile is taken at it, not at a neighbouring integer.
    """
    if df <= 0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need df > 0 and 0 < confidence < 1, got df={df}, {confidence}")
    return float(scipy_stats.t.ppf((1.0 + confidence) / 2.0, df))


def mean(samples: Sequence[float]) -> float:
    return float(np.mean(samples)) if len(samples) else math.nan


def coefficient_of_variation(samples: Sequence[float]) -> float:
    """Sample standard deviation / mean over launches; NaN with fewer than two."""
    if len(samples) < 2:
        return math.nan
    return float(scipy_stats.variation(samples, ddof=1))


def t_interval(
    samples: Sequence[float], *, confidence: float = 0.95, floor: float = -math.inf
) -> Interval:
    """Student-t interval of the mean of independent launches: mean +- t * s / sqrt(n).

    Undefined (NO_INTERVAL) for fewer than two launches: one launch says nothing about spread.
    `floor` cuts the interval at a bound the true value cannot cross (img/s >= 0), which keeps
    its coverage.
    """
    data = np.asarray(samples, dtype=float)
    if data.size < 2:
        return NO_INTERVAL
    centre = float(data.mean())
    half = t_quantile(confidence, data.size - 1) * float(scipy_stats.sem(data))
    return Interval(max(centre - half, floor), centre + half)


def efficiency_ci(
    throughputs_n: Sequence[float],
    ideal_speedup: float,
    throughputs_1: Sequence[float],
    *,
    confidence: float = 0.95,
) -> Interval:
    """Interval of mean T(N) / (ideal speed-up * mean T(1)), both sets of launches uncertain.

    Delta method on the log of the ratio: var(log r) ~ s_n^2 / (n_n m_n^2) + s_1^2 / (n_1 m_1^2),
    with Welch-Satterthwaite degrees of freedom for the t critical value; the
    interval is exp(log r +- t * se), so it stays positive and is wider above than below.
    """
    num = np.asarray(throughputs_n, dtype=float)
    den = np.asarray(throughputs_1, dtype=float)
    if num.size < 2 or den.size < 2 or num.mean() <= 0 or den.mean() <= 0:
        return NO_INTERVAL
    ratio = float(num.mean() / den.mean()) / ideal_speedup
    # var(log mean) ~ (standard error / mean)^2 for each set of launches
    parts = [float((scipy_stats.sem(x) / x.mean()) ** 2) for x in (num, den)]
    variance = sum(parts)
    if variance == 0.0:
        return Interval(ratio, ratio)
    df = variance**2 / sum(v**2 / (x.size - 1) for v, x in zip(parts, (num, den), strict=True))
    half = t_quantile(confidence, df) * math.sqrt(variance)
    return Interval(ratio * math.exp(-half), ratio * math.exp(half))


@dataclass(frozen=True)
class EpochModel:
    """T(N) = fixed_s + scalable_s / N seconds per epoch."""

    fixed_s: float
    scalable_s: float

    def seconds(self, gpus: int) -> float:
        return self.fixed_s + self.scalable_s / gpus

    @property
    def negative_terms(self) -> list[str]:
        """The terms below zero: no real epoch has negative fixed or scalable time."""
        terms = {"a (fixed)": self.fixed_s, "b (scalable)": self.scalable_s}
        return [name for name, value in terms.items() if value < 0]


def fit_epoch_model(gpus: Sequence[int], epoch_s: Sequence[float]) -> EpochModel:
    """Least-squares fit of T(N) = a + b/N (exact through two points)."""
    if len(set(gpus)) < 2:
        raise ValueError("need epoch times for at least two different GPU counts")
    design = np.column_stack([np.ones(len(gpus)), 1.0 / np.asarray(gpus, dtype=float)])
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(epoch_s, dtype=float), rcond=None)
    return EpochModel(float(a), float(b))


def busbw(algbw_value: float, ranks: int) -> float:
    """Per-link bandwidth of a ring allreduce: algbw * 2(n-1)/n (nccl-tests' busbw)."""
    return algbw_value * 2.0 * (ranks - 1) / ranks


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

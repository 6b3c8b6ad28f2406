"""The arithmetic, on inputs whose answers are worked out by hand in each test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from bench import stats


def test_throughput_is_images_over_window() -> None:
    assert stats.throughput(64, 2.0) == 32.0
    with pytest.raises(ValueError):
        stats.throughput(64, 0.0)


def test_throughput_is_not_the_mean_of_step_rates() -> None:
    # two steps of 8 images taking 0.1 s and 0.3 s: 16 images in 0.4 s = 40 img/s, while the
    # mean of per-step rates (80 and 26.7 img/s) would claim 53.3 img/s
    steps = [0.1, 0.3]
    assert stats.throughput(16, sum(steps)) == pytest.approx(40.0)
    assert np.mean([8 / s for s in steps]) == pytest.approx(53.333, rel=1e-3)


def test_slowest_rank_bounds_window_and_each_step() -> None:
    assert stats.slowest_rank_steps([[0.1, 0.3, 0.2], [0.2, 0.1, 0.2]]) == [0.2, 0.3, 0.2]
    with pytest.raises(ValueError, match="different numbers of steps"):
        stats.slowest_rank_steps([[0.1, 0.2], [0.1]])


def test_rank_imbalance() -> None:
    assert stats.rank_imbalance([2.0, 2.5]) == pytest.approx(0.25)
    assert stats.rank_imbalance([3.0, 3.0]) == 0.0


def test_efficiency() -> None:
    assert stats.efficiency(360.0, 4, 100.0) == pytest.approx(0.9)
    # the seed claim of ANCHORS.md: 560 s/epoch on 1 GPU, 148 s on 4 -> 3.78x, 94.6 %
    assert stats.efficiency(1 / 148, 4, 1 / 560) == pytest.approx(0.946, abs=1e-3)


def test_t_quantile_matches_the_printed_tables() -> None:
    # two-sided 95 % critical values of Student's t (any statistics table)
    for df, value in [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (10, 2.228), (29, 2.045)]:
        assert stats.t_quantile(0.95, df) == pytest.approx(value, abs=5e-4)
    assert stats.t_quantile(0.99, 5) == pytest.approx(4.032, abs=5e-4)
    with pytest.raises(ValueError):
        stats.t_quantile(0.95, 0)


@pytest.mark.parametrize("df", [1.37, 2.5, 6.06])
def test_t_quantile_at_a_real_df_is_student_t_s(df: float) -> None:
    # Welch-Satterthwaite df are real (6.06 in the second case of the ratio test below); the
    # quantile is Student's t at that df, not one read off a neighbouring integer or a line in
    # 1/df between the two (the interpolation this replaced was 19 % too wide at df 1.37)
    assert stats.t_quantile(0.95, df) == pytest.approx(scipy.stats.t.ppf(0.975, df), rel=1e-12)
    assert stats.t_quantile(0.95, math.floor(df) + 1) < stats.t_quantile(0.95, df)
    assert stats.t_quantile(0.95, df) < stats.t_quantile(0.95, math.floor(df))


def test_t_interval_by_hand() -> None:
    # mean 100, s = sqrt(8), se = 2, t(0.975, 1) = 12.706
    interval = stats.t_interval([98.0, 102.0])
    assert (interval.low, interval.high) == pytest.approx((100 - 25.412, 100 + 25.412), abs=1e-2)
    same = stats.t_interval([5.0, 5.0, 5.0])
    assert (same.low, same.high) == (5.0, 5.0)


def test_one_launch_has_no_interval() -> None:
    # the percentile bootstrap printed "(92.3 to 92.3)" for a single launch
    assert not stats.t_interval([92.3]).defined
    assert not stats.t_interval([]).defined
    assert not stats.efficiency_ci([180.0], 2, [100.0, 101.0]).defined
    assert math.isnan(stats.coefficient_of_variation([92.3]))


def coverage(intervals: list[stats.Interval], truth: float) -> float:
    return float(np.mean([i.low <= truth <= i.high for i in intervals]))


@pytest.mark.parametrize("launches", [2, 3, 5])
def test_t_interval_covers_the_mean_95_percent_of_the_time(launches: int) -> None:
    # 4,000 simulated sweeps of `launches` launches at 100 +- 5 img/s: the true mean must lie in
    # 95 % of the intervals (Monte Carlo standard error 0.34 %). The percentile bootstrap that
    # this replaced covered about 75 % with 3 launches and 50 % with 2.
    samples = np.random.default_rng(12).normal(100.0, 5.0, size=(4000, launches))
    assert coverage([stats.t_interval(s) for s in samples], 100.0) == pytest.approx(0.95, abs=0.015)


@pytest.mark.parametrize(
    ("launches_n", "launches_1", "sd_n", "sd_1"),
    [(3, 3, 10.0, 5.0), (2, 3, 10.0, 5.0), (5, 5, 10.0, 5.0), (3, 3, 20.0, 2.0)],
)
def test_efficiency_interval_covers_the_true_ratio(
    launches_n: int, launches_1: int, sd_n: float, sd_1: float
) -> None:
    # true efficiency 190 / (2 x 100) = 0.95; both throughputs vary between launches
    rng = np.random.default_rng(7)
    n = rng.normal(190.0, sd_n, size=(4000, launches_n))
    one = rng.normal(100.0, sd_1, size=(4000, launches_1))
    intervals = [stats.efficiency_ci(a, 2, b) for a, b in zip(n, one, strict=True)]
    assert coverage(intervals, 0.95) == pytest.approx(0.95, abs=0.025)


def test_efficiency_interval_carries_both_uncertainties() -> None:
    same = stats.efficiency_ci([180.0] * 3, 2, [100.0] * 3)
    assert (same.low, same.high) == pytest.approx((0.9, 0.9))
    exact_baseline = stats.efficiency_ci([190.0, 180.0, 200.0], 2, [100.0] * 3)
    noisy_baseline = stats.efficiency_ci([190.0, 180.0, 200.0], 2, [100.0, 110.0, 90.0])
    assert exact_baseline.low < 0.95 < exact_baseline.high
    assert noisy_baseline.low < exact_baseline.low and noisy_baseline.high > exact_baseline.high
    # on a log scale: further above the point than below it, never negative
    assert noisy_baseline.high - 0.95 > 0.95 - noisy_baseline.low > 0
    # ideal speed-up 1 (two ranks sharing the cores one rank had): efficiency = speed-up
    assert stats.efficiency(60.0, 1.0, 64.0) == pytest.approx(0.9375)


def test_coefficient_of_variation() -> None:
    assert stats.coefficient_of_variation([90.0, 100.0, 110.0]) == pytest.approx(0.1)


def test_epoch_model_through_the_seed_claim() -> None:
    # T(1) = a + b = 560, T(4) = a + b/4 = 148  ->  b = 412 / 0.75 = 549.33, a = 10.67
    fit = stats.fit_epoch_model([1, 4], [560.0, 148.0])
    assert fit.scalable_s == pytest.approx(549.333, abs=1e-3)
    assert fit.fixed_s == pytest.approx(10.667, abs=1e-3)
    assert fit.seconds(4) == pytest.approx(148.0)


def test_epoch_model_names_negative_terms() -> None:
    # the reported fit: T(N) = 44,399.9 - 11,706.1/N through T(1) and T(2)
    fit = stats.fit_epoch_model([1, 2], [32_693.8, 38_546.85])
    assert (fit.fixed_s, fit.scalable_s) == pytest.approx((44_399.9, -11_706.1))
    assert fit.negative_terms == ["b (scalable)"]
    assert stats.fit_epoch_model([1, 4], [560.0, 148.0]).negative_terms == []


def test_epoch_model_recovers_exact_data() -> None:
    fit = stats.fit_epoch_model([1, 2, 4], [100.0, 55.0, 32.5])  # a = 10, b = 90
    assert (fit.fixed_s, fit.scalable_s) == pytest.approx((10.0, 90.0))
    with pytest.raises(ValueError):
        stats.fit_epoch_model([2, 2], [1.0, 1.0])


def test_bus_bandwidth_as_nccl_tests_defines_it() -> None:
    assert stats.busbw(10.0, 2) == pytest.approx(10.0)  # 2(n-1)/n = 1
    assert stats.busbw(10.0, 8) == pytest.approx(17.5)  # 2 * 7 / 8


def test_communication_ceiling() -> None:
    assert stats.comm_ceiling(0.1, 0.05) == 1.0  # hidden behind compute
    assert stats.comm_ceiling(0.1, 0.2) == pytest.approx(0.5)  # the step waits for the network
    assert stats.comm_serial_estimate(0.1, 0.05) == pytest.approx(2 / 3)


def test_flop_bound() -> None:
    # ANCHORS.md: H100 dense bf16 989 TFLOP/s / 24.6 GFLOP per image ~ 40k img/s
    assert stats.flop_bound_images_per_s(989.4e12, 24.6e9) == pytest.approx(40219.5, abs=0.1)


def test_percentile() -> None:
    assert stats.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert stats.percentile([0.0, 10.0], 90) == pytest.approx(9.0)


def test_t_interval_respects_a_floor() -> None:
    # two launches at 0.7 and 2.1 img/s: mean 1.4, t(0.975, 1) x 0.7 = 8.9 -> no negative img/s
    interval = stats.t_interval([0.7, 2.1], floor=0.0)
    assert interval.low == 0.0 and interval.high == pytest.approx(1.4 + 12.706 * 0.7, abs=1e-2)
    assert stats.t_interval([0.7, 2.1]).low < 0


def welch_df(a: list[float], b: list[float]) -> float:
    """Welch-Satterthwaite degrees of freedom of log-ratio variance parts, written out here."""
    parts = [np.var(x, ddof=1) / (len(x) * np.mean(x) ** 2) for x in (a, b)]
    weights = [p**2 / (len(x) - 1) for p, x in zip(parts, (a, b), strict=True)]
    return float(sum(parts) ** 2 / sum(weights))


@pytest.mark.parametrize(
    ("numerator", "denominator"),
    [
        ([190.0, 150.0, 230.0], [100.0, 100.5, 99.5, 100.0, 100.2, 99.8]),  # df near 2
        ([190.0, 189.0, 191.0, 190.5, 189.5], [100.0, 101.0, 99.0, 100.5, 99.5]),  # df 6.06
    ],
)
def test_efficiency_interval_uses_welch_satterthwaite_degrees_of_freedom(
    numerator: list[float], denominator: list[float]
) -> None:
    # the half-width on the log scale is t(df) x se: a df that ignores the launches' counts and
    # variances (a constant) gives another t and another interval in one of these cases
    num, den = np.asarray(numerator), np.asarray(denominator)
    se = math.sqrt(sum(np.var(x, ddof=1) / (x.size * x.mean() ** 2) for x in (num, den)))
    half = scipy.stats.t.ppf(0.975, welch_df(numerator, denominator)) * se
    ratio = num.mean() / den.mean()
    interval = stats.efficiency_ci(numerator, 1.0, denominator)
    assert math.log(interval.high / ratio) == pytest.approx(half, rel=1e-9)
    assert math.log(ratio / interval.low) == pytest.approx(half, rel=1e-9)

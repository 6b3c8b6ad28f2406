"""The arithmetic, on inputs whose answers are worked out by hand in each test."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
    assert stats.slowest_window([1.0, 1.5, 1.2]) == 1.5
    assert stats.slowest_rank_steps([[0.1, 0.3, 0.2], [0.2, 0.1, 0.2]]) == [0.2, 0.3, 0.2]
    with pytest.raises(ValueError, match="different numbers of steps"):
        stats.slowest_rank_steps([[0.1, 0.2], [0.1]])


def test_rank_imbalance() -> None:
    assert stats.rank_imbalance([2.0, 2.5]) == pytest.approx(0.25)
    assert stats.rank_imbalance([3.0, 3.0]) == 0.0


def test_speedup_and_efficiency() -> None:
    assert stats.speedup(360.0, 100.0) == pytest.approx(3.6)
    assert stats.efficiency(360.0, 4, 100.0) == pytest.approx(0.9)
    # the seed claim of ANCHORS.md: 560 s/epoch on 1 GPU, 148 s on 4 -> 3.78x, 94.6 %
    assert stats.speedup(1 / 148, 1 / 560) == pytest.approx(3.784, abs=1e-3)
    assert stats.efficiency(1 / 148, 4, 1 / 560) == pytest.approx(0.946, abs=1e-3)


def test_bootstrap_of_identical_repeats_is_a_point() -> None:
    interval = stats.bootstrap_ci([5.0, 5.0, 5.0])
    assert (interval.low, interval.high) == (5.0, 5.0)


def test_bootstrap_of_two_values_spans_them() -> None:
    # resampled means of [0, 1] are 0, 0.5, 1 with probability 1/4, 1/2, 1/4: the 2.5th and
    # 97.5th percentiles of 10,000 draws are 0 and 1
    interval = stats.bootstrap_ci([0.0, 1.0])
    assert (interval.low, interval.high) == (0.0, 1.0)


def test_bootstrap_lies_within_the_data_and_is_reproducible() -> None:
    samples = [98.0, 103.0, 101.0, 97.0, 104.0]
    interval = stats.bootstrap_ci(samples)
    assert min(samples) <= interval.low <= np.mean(samples) <= interval.high <= max(samples)
    assert stats.bootstrap_ci(samples) == interval
    assert math.isnan(stats.bootstrap_ci([]).low)


def test_efficiency_interval() -> None:
    same = stats.efficiency_ci([180.0] * 3, 2, [100.0] * 3)
    assert (same.low, same.high) == pytest.approx((0.9, 0.9))
    assert stats.efficiency_ci([1.0], 1, [2.0]) == stats.Interval(1.0, 1.0)
    # any resampled mean ratio lies between the extreme ratios 180/(2*110) and 200/(2*90)
    spread = stats.efficiency_ci([190.0, 180.0, 200.0], 2, [100.0, 110.0, 90.0])
    assert 180 / 220 <= spread.low < 0.95 < spread.high <= 200 / 180
    assert math.isnan(stats.efficiency_ci([], 2, [1.0]).low)


def test_epoch_model_through_the_seed_claim() -> None:
    # T(1) = a + b = 560, T(4) = a + b/4 = 148  ->  b = 412 / 0.75 = 549.33, a = 10.67
    fit = stats.fit_epoch_model([1, 4], [560.0, 148.0])
    assert fit.scalable_s == pytest.approx(549.333, abs=1e-3)
    assert fit.fixed_s == pytest.approx(10.667, abs=1e-3)
    assert fit.seconds(4) == pytest.approx(148.0)


def test_epoch_model_recovers_exact_data() -> None:
    fit = stats.fit_epoch_model([1, 2, 4], [100.0, 55.0, 32.5])  # a = 10, b = 90
    assert (fit.fixed_s, fit.scalable_s) == pytest.approx((10.0, 90.0))
    with pytest.raises(ValueError):
        stats.fit_epoch_model([2, 2], [1.0, 1.0])


def test_epoch_seconds() -> None:
    # ImageNet-1k in 560 s would need 2,288 img/s
    assert stats.epoch_seconds(1_281_167, 1_281_167 / 560) == pytest.approx(560.0)


def test_bus_bandwidth_as_nccl_tests_defines_it() -> None:
    assert stats.algbw(100e6, 0.01) == pytest.approx(1e10)
    assert stats.busbw(10.0, 2) == pytest.approx(10.0)  # 2(n-1)/n = 1
    assert stats.busbw(10.0, 8) == pytest.approx(17.5)  # 2 * 7 / 8
    assert stats.allreduce_seconds(102e6, 1.02e9) == pytest.approx(0.1)


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

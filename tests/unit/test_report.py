"""The report on known rows: summaries worked out by hand, Markdown, flags and plots."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from bench_builders import run_row, with_status

from bench import report, stats
from bench.report import diagnosis, epochs, plots, tables
from bench.results import ResultStore
from bench.schema import ProbeRow, RunRow

ROOT = Path(__file__).resolve().parents[2]

# DDP: 1 rank at 100, 110, 90 img/s (mean 100); 2 ranks at 190, 180, 200 (mean 190), each rank
# with 2 threads (the builder's default): 4 cores against 2, ideal 2x, efficiency 0.95.
DDP_ROWS = [
    run_row(run_id=f"ddp-n1-r{i}", repeat=i, throughput=t, step_time_median_s=0.08)
    for i, t in enumerate([100.0, 110.0, 90.0])
] + [
    run_row(
        run_id=f"ddp-n2-r{i}",
        repeat=i,
        gpus=2,
        gpus_per_node=2,
        global_batch=16,
        throughput=t,
        step_time_median_s=0.09,
    )
    for i, t in enumerate([190.0, 180.0, 200.0])
]
FAILED = with_status(
    run_row(run_id="ddp-n2-r3", repeat=3, gpus=2, global_batch=16), "failed", "exitcode : 3"
)
HOROVOD_ROWS = [
    run_row(run_id="hvd-n1", launcher="horovod", throughput=95.0),
    run_row(run_id="hvd-n2", launcher="horovod", gpus=2, throughput=171.0),
]
# The CPU smoke sweep: 1 rank x 2 threads, then 2 ranks x 1 thread on the same 2 cores.
SHARED = [
    run_row(run_id=f"n1-r{i}", repeat=i, throughput=t, step_time_median_s=0.125)
    for i, t in enumerate([64.0, 62.0, 66.0])
] + [
    run_row(
        run_id=f"n2-r{i}",
        repeat=i,
        gpus=2,
        gpus_per_node=2,
        global_batch=16,
        threads_per_rank=1,
        throughput=t,
        step_time_median_s=0.27,
    )
    for i, t in enumerate([60.0, 58.0, 62.0])
]
META = {
    "sweep_id": "s1",
    "state": "complete",
    "started_at": "t",
    "elapsed_s": 60.0,
    "config": {
        "device": "cpu",
        "model": "resnet50",
        "batch_size": 8,
        "image_size": 32,
        "data": "synthetic",
        "warmup_steps": 2,
        "steps": 8,
        "repeats": 3,
        "dataset_size": 1_281_167,
        "claim": [[1, 560.0], [4, 148.0]],
    },
    "system": {"host": "vm"},
}


def probe(gpus: int, algbw_gbps: float) -> ProbeRow:
    return ProbeRow(
        sweep_id="s",
        probe_id=f"allreduce-n{gpus}",
        status="ok",
        error="",
        started_at="t",
        gpus=gpus,
        nodes=1,
        gpus_per_node=gpus,
        hosts=f"localhost:{gpus}",
        device="cpu",
        backend="gloo",
        interconnect="loopback (gloo)",
        nbytes=100_000_000,
        iterations=5,
        time_s=0.1,
        algbw_gbps=algbw_gbps,
        busbw_gbps=algbw_gbps,
    )


def test_summary_of_known_rows() -> None:
    # 102.228128 MB of gradients at 1.02228128 GB/s take 0.1 s; compute per step is the 1-rank
    # 0.08 s x (2 threads / 2 threads); gloo on the same cores adds to it: 0.08 / 0.18
    points = report.summarise([*DDP_ROWS, FAILED], [probe(2, 1.02228128)])
    one, two = points
    assert (one.gpus, one.runs_ok, one.runs_total) == (1, 3, 3)
    assert one.throughput == pytest.approx(100.0)
    assert (one.speedup, one.efficiency, one.comm_ceiling) == (1.0, 1.0, 1.0)
    assert (two.gpus, two.runs_ok, two.runs_total, two.global_batch) == (2, 3, 4, 16)
    assert (two.throughput, two.throughput_per_gpu) == pytest.approx((190.0, 95.0))
    assert (two.ideal_speedup, two.speedup, two.efficiency) == pytest.approx((2.0, 1.9, 0.95))
    # mean +- t(0.975, 2) x 10 / sqrt(3)
    half = 4.303 * 10 / math.sqrt(3)
    assert (two.throughput_ci.low, two.throughput_ci.high) == pytest.approx(
        (190 - half, 190 + half), abs=0.01
    )
    assert two.efficiency_ci == stats.efficiency_ci([190, 180, 200], 2, [100, 110, 90])
    assert two.cv == pytest.approx(10 / 190)
    assert two.comm_ceiling == pytest.approx(0.08 / 0.18)
    assert (two.allreduce_s, two.compute_s) == pytest.approx((0.1, 0.08))
    assert two.step_time_s == pytest.approx(0.09)


def test_gpu_ceiling_assumes_overlap_and_fp16_halves_the_bytes() -> None:
    gpu = [dataclasses.replace(r, device="cuda") for r in DDP_ROWS]
    two = report.summarise(gpu, [probe(2, 1.02228128)])[1]
    assert two.ideal_speedup == 2.0 and two.comm_ceiling == pytest.approx(0.8)  # 0.08 / 0.1
    half = [dataclasses.replace(r, fp16_allreduce=True) for r in gpu]
    assert report.summarise(half, [probe(2, 1.02228128)])[1].comm_ceiling == 1.0


def test_ranks_sharing_cores_have_an_ideal_of_one() -> None:
    one, two = report.summarise(SHARED, [probe(2, 1.02228128)])
    assert one.placement == "1 rank x 2 threads"
    assert two.placement == "2 ranks x 1 thread, sharing 2 cores" and two.shares_cores
    assert two.ideal_speedup == 1.0
    assert two.efficiency == pytest.approx(60 / 64)  # the speed-up itself
    # compute per step: 0.125 s x 2 threads / 1 thread = 0.25 s, plus 0.1 s of allreduce
    assert two.comm_ceiling == pytest.approx(0.25 / 0.35)


def test_no_probe_no_ceiling_no_baseline_no_efficiency() -> None:
    two = report.summarise(DDP_ROWS[3:], [])[0]
    assert two.throughput == pytest.approx(190.0)
    for value in (two.speedup, two.efficiency, two.comm_ceiling):
        assert math.isnan(value)  # nothing to compare against


def test_one_launch_says_so_instead_of_a_degenerate_interval() -> None:
    text = "\n".join(report.scaling_table(report.summarise([run_row(throughput=92.3)], [])))
    assert "92.3 (1 launch: no interval)" in text
    assert "92.3 to 92.3" not in text
    flags = diagnosis.sanity_flags(report.summarise([run_row(throughput=92.3)], []), [], 1)
    assert any("one successful launch: no interval" in f for f in flags)


def test_every_column_names_its_statistic_as_the_docs_do() -> None:
    docs = (ROOT / "docs" / "results" / "README.md").read_text()
    for cpu in (True, False):
        header = tables.scaling_header(cpu)
        assert "img/s (mean of launches, 95 % CI)" in header
        assert "step ms (mean of launches of the per-launch median step)" in header
        for column in header:
            assert f"`{column}`" in docs, column
    assert "median img/s" not in docs.lower()


def test_markdown_for_a_cpu_sweep() -> None:
    rows, probes = [*DDP_ROWS, FAILED, *HOROVOD_ROWS], [probe(2, 1.02228128)]
    text = report.markdown(META, rows, probes, report.summarise(rows, probes), [])
    assert "CPU SMOKE TEST: NOT GPU RESULTS" in text
    assert "| ddp | fp32-nchw | 2 | 1 | 16 | 2 ranks x 2 threads, sharing 4 cores | 190.0 (" in text
    assert "| 1.90x (2.00x) | 95.0 % (" in text
    assert "| 44.4 % |" in text  # the allreduce ceiling: gloo adds 0.1 s to 0.08 s
    assert "| 5.3 % | 3/4 |" in text  # CV 10 / 190, runs ok at 2 ranks
    assert stats.MEAN_METHOD in text and stats.RATIO_METHOD in text
    assert "| fp32-nchw | 2 | 190.0 | 171.0 | 0.900 |" in text  # Horovod / DDP
    assert "| ddp-n2-r3 | failed | exitcode : 3 |" in text
    assert "do not apply" in text  # no GPU: no published figures, no FLOP bound
    assert "| ddp | fp32-nchw | 1 | 12,812 |" in text  # 1,281,167 images at 100 img/s
    assert "| 1 | 560 | 2,287.8 | 2,287.8 |" in text  # the claim of ANCHORS.md
    assert "T(N) = 10.7 + 549.3/N s" in text
    assert "weak scaling" in text


def test_launchers_side_by_side_each_in_its_own_layout() -> None:
    # a CPU sweep's defaults: DDP in NCHW, TensorFlow in NHWC (LauncherKind.cpu_channels_last)
    def row(launcher: str, layout: str, throughput: float) -> RunRow:
        variant = f"fp32-{layout}"
        return run_row(
            run_id=f"{launcher}-n1-{variant}-r0",
            launcher=launcher,
            variant=variant,
            channels_last=layout == "channels_last",
            throughput=throughput,
        )

    rows = [row("ddp", "nchw", 100.0), row("tf", "channels_last", 120.0)]
    text = report.markdown(META, rows, [], report.summarise(rows, []), [])
    assert "| tf | fp32-channels_last | 1 |" in text and "| ddp | fp32-nchw | 1 |" in text
    side = text.split("## Launchers side by side")[1].split("##")[0]
    assert (
        "| variant | ranks | DDP img/s in nchw (mean of launches) | TensorFlow img/s in "
        "channels_last (mean of launches) | TensorFlow / DDP |" in side
    )
    assert "| fp32 | 1 | 100.0 | 120.0 | 1.200 |" in side
    # both layouts asked for every launcher: each layout beside itself, named in the variant
    rows += [row("ddp", "channels_last", 90.0), row("tf", "nchw", 80.0)]
    side = "\n".join(tables.launcher_comparison(report.summarise(rows, [])))
    assert "| DDP img/s (mean of launches) | TensorFlow img/s (mean of launches) |" in side
    assert "| fp32-channels_last | 1 | 90.0 | 120.0 | 1.333 |" in side
    assert "| fp32-nchw | 1 | 100.0 | 80.0 | 0.800 |" in side


def test_cpu_report_explains_shared_cores_from_the_rows() -> None:
    # 102.2 MB at 4.0891 GB/s: 25 ms of allreduce on top of 250 ms of compute -> at most 90.9 %
    probes = [probe(2, 4.08912512)]
    text = report.markdown(META, SHARED, probes, report.summarise(SHARED, probes), [])
    assert "| 2 ranks x 1 thread, sharing 2 cores |" in text
    assert "| 0.94x (1.00x) |" in text  # speed-up against an ideal of 1: the same 2 cores
    assert "ideal speed-up = cores used at N" in text
    why = text.split("## Why not linear?")[1].split("##")[0]
    assert "use the same cores as 1 rank x 2 threads: the ideal speed-up is 1.00x" in why
    assert "efficiency 93.8 % is explained by communication" in why
    assert "25.0 ms against ~250.0 ms of compute per step, adding to each step, as gloo runs" in why
    assert "overlap" not in why  # no generic guess about communication overlap


def test_efficiency_above_the_allreduce_bound_says_the_bound_is_off() -> None:
    # 100 ms of allreduce on 250 ms of compute allows 71.4 %, yet 93.8 % was measured
    notes = diagnosis.observations(report.summarise(SHARED, [probe(2, 1.02228128)]))
    assert any("93.8 % is above the allreduce ceiling" in n for n in notes)


def test_unexplained_gap_is_called_unexplained() -> None:
    rows = [dataclasses.replace(r, device="cuda") for r in DDP_ROWS[:3]] + [
        run_row(gpus=2, device="cuda", global_batch=16, throughput=t) for t in (120.0, 121.0)
    ]
    notes = diagnosis.observations(report.summarise(rows, [probe(2, 100.0)]))
    assert len(notes) == 1
    assert "unexplained by what this sweep records" in notes[0]
    assert "data wait 0.0 %, rank imbalance 0.0 %" in notes[0]


def test_measured_causes() -> None:
    base = [run_row(throughput=t) for t in (100.0, 101.0)]
    starved = [
        run_row(
            gpus=4,
            throughput=300.0,
            data_wait_fraction=0.2,
            rank_imbalance=0.3,
            throttle_reasons="gpu_idle,sw_power_cap",
        )
    ]
    notes = diagnosis.observations(report.summarise([*base, *starved], []))
    text = "\n".join(notes)
    assert "no allreduce probe was measured" in text
    assert "input-bound: 20.0 %" in text
    assert "stragglers: the slowest rank took 30.0 % longer" in text
    assert "clocks were held down (sw_power_cap)" in text


def flag_text(rows: list, claim: list | None = None, dataset: int = 1_281_167) -> str:
    points = report.summarise(rows, [])
    return "\n".join(diagnosis.sanity_flags(points, rows, dataset, claim or []))


def test_flag_negative_epoch_fit_terms_and_print_them_sanely() -> None:
    flags = flag_text(DDP_ROWS, [[1, 32_693.8], [2, 38_546.85]])
    assert "T(N) = 44,399.9 - 11,706.1/N s **(negative b (scalable)" in flags
    assert "+ -" not in flags
    # the measured fit too: 2 ranks slower than 1 makes the scalable term negative
    slower = [*DDP_ROWS[:3], *(run_row(gpus=2, throughput=t) for t in (50.0, 52.0))]
    assert "ddp fp32-nchw: epoch fit T(N) =" in flag_text(slower)
    assert "epoch fit" not in flag_text(DDP_ROWS)


def test_flag_efficiency_above_100_percent_only_beyond_noise() -> None:
    above = [*DDP_ROWS[:3], *(run_row(gpus=2, throughput=t) for t in (260.0, 262.0, 258.0))]
    assert "above 100 % beyond noise" in flag_text(above)
    within = [*DDP_ROWS[:3], *(run_row(gpus=2, throughput=t) for t in (150.0, 250.0, 220.0))]
    assert "beyond noise" not in flag_text(within)


def test_flag_noise_above_the_stated_threshold() -> None:
    assert "threshold 5.0 %" in flag_text(DDP_ROWS)  # CV 10 % at 1 rank
    quiet = [run_row(throughput=t) for t in (100.0, 101.0, 99.0)]
    assert "noisy" not in flag_text(quiet)
    assert "CV of img/s over launches above 5.0 %" in diagnosis.THRESHOLDS_TEXT


def test_flag_img_per_s_that_contradicts_the_median_step() -> None:
    # the reported case: 39.2 img/s beside a 515 ms median step at batch 8 (15.5 img/s)
    rows = [run_row(throughput=t, step_time_median_s=0.515) for t in (39.0, 39.4)]
    assert "disagree by more than 25.0 %" in flag_text(rows)
    assert "disagree" not in flag_text([run_row(throughput=64.0, step_time_median_s=0.125)])


def test_flag_results_above_the_flop_bound() -> None:
    gpu = {
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "precision": "amp-bf16",
        "variant": "amp-bf16-nchw",
        "image_size": 224,
    }
    rows = [
        run_row(run_id="a", throughput=2500.0, **gpu),
        run_row(run_id="b", gpus=2, throughput=100_000.0, **gpu),
    ]
    assert "above the FLOP bound of 40,220: a measurement bug" in flag_text(rows)
    assert "FLOP bound" not in flag_text(rows[:1])


def test_reference_section_on_a_gpu_flags_impossible_results() -> None:
    gpu = {
        "device": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "precision": "amp-bf16",
        "variant": "amp-bf16-nchw",
        "image_size": 224,
    }
    rows = [
        run_row(run_id="a", throughput=2500.0, **gpu),
        run_row(run_id="b", gpus=2, throughput=100_000.0, **gpu),  # 50k per GPU > 40.2k bound
    ]
    lines = "\n".join(report.comparison.reference_section(rows, report.summarise(rows, [])))
    assert "H100 SXM" in lines
    assert "| ddp | amp-bf16-nchw | 1 | 2,500.0 | 40,220 | 6.2 % |" in lines
    assert "2,791.0 (Lambda deeplearning-benchmark, 1 GPU) | 89.6 % | 35.7 % |" in lines
    assert "ABOVE THE FLOP BOUND" in lines
    assert "MLPerf Training v3.0/v3.1" in lines


def test_markdown_for_a_gpu_sweep_has_no_cpu_banner() -> None:
    meta = {"config": {"device": "cuda", "dataset_size": 100}, "system": {}}
    rows = [run_row(device="cuda", device_name="NVIDIA A40")]
    text = report.markdown(meta, rows, [], report.summarise(rows, []), [])
    assert "CPU SMOKE TEST" not in text and "| GPUs | nodes |" in text


def test_signed_terms() -> None:
    assert tables.signed_terms(10.0, -5.0) == "10.0 - 5.0/N"
    assert tables.signed_terms(-1.0, 5.0) == "-1.0 + 5.0/N"
    assert "negative a (fixed)" in epochs.fit_text(stats.EpochModel(-1.0, 5.0))


def test_efficiency_axis_keeps_its_scale_and_marks_what_it_cuts(tmp_path: Path) -> None:
    # the reported case: one efficiency interval of 27 % to 640 % stretched the axis to 6.5
    wide = dataclasses.replace(
        report.summarise(DDP_ROWS, [])[1], efficiency_ci=stats.Interval(0.27, 6.4)
    )
    bottom, top = plots.plot_efficiency([wide], tmp_path / "e.png")
    assert (bottom, top) == (0.0, 1.2)
    bar = plots.clip_bar(wide.efficiency, wide.efficiency_ci, bottom, top)
    assert (bar.low, bar.high, bar.cut_low, bar.cut_high) == (0.27, 1.2, None, 6.4)
    assert plots.efficiency_axis([dataclasses.replace(wide, efficiency=5.0)]) == (0.0, 2.0)
    lone = plots.clip_bar(5.0, stats.NO_INTERVAL, 0.0, 2.0)  # one launch, far above the axis
    assert (lone.low, lone.high, lone.cut_high) == (2.0, 2.0, 5.0)
    assert plots.throughput_axis(report.summarise(DDP_ROWS, [])) == (0.0, 1.25 * 200.0)


def test_write_report_makes_markdown_and_plots(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.create({"sweep_id": "s", "state": "complete", "config": {"device": "cpu"}})
    for row in [*DDP_ROWS, FAILED, *HOROVOD_ROWS]:
        store.runs.append(row)
    store.probes.append(probe(2, 1.02228128))
    path = report.write_report(tmp_path)
    assert path == tmp_path / "report.md" and "## Failures" in path.read_text()
    for name in ("throughput.png", "efficiency.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_without_successful_runs(tmp_path: Path) -> None:
    points = report.summarise([FAILED], [])
    plots.plot_throughput(points, tmp_path / "t.png")
    plots.plot_efficiency(points, tmp_path / "e.png")
    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "e.png").stat().st_size > 0


def test_efficiency_above_the_ideal_is_not_blamed_on_communication() -> None:
    # a loaded machine: the 1-rank baseline crawled (1.4 img/s), 2 ranks on the same cores did 15
    rows = [run_row(throughput=t, step_time_median_s=6.5) for t in (0.9, 1.9)] + [
        run_row(gpus=2, global_batch=16, threads_per_rank=1, throughput=t) for t in (12.0, 18.0)
    ]
    notes = diagnosis.observations(report.summarise(rows, [probe(2, 0.51)]))
    assert any("is above the ideal, which no allreduce can explain" in n for n in notes)
    assert not any("allreduce ceiling" in n for n in notes)
    table = "\n".join(report.scaling_table(report.summarise(rows, [])))
    assert "1.4 (0.0 to " in table  # the interval of img/s stops at zero

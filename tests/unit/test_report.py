"""The report on known rows: summaries worked out by hand, Markdown and plots."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from bench_builders import run_row, with_status

from bench import report
from bench.results import ResultStore
from bench.schema import ProbeRow

# DDP: 1 GPU at 100, 110, 90 img/s (mean 100); 2 GPUs at 190, 180, 200 (mean 190):
# speed-up 1.9, efficiency 190 / (2 x 100) = 0.95. One more 2-GPU run failed.
DDP_ROWS = [
    run_row(run_id=f"ddp-n1-r{i}", repeat=i, throughput=t, step_time_median_s=0.08)
    for i, t in enumerate([100.0, 110.0, 90.0])
] + [
    run_row(run_id=f"ddp-n2-r{i}", repeat=i, gpus=2, gpus_per_node=2, global_batch=16,
            throughput=t, step_time_median_s=0.09)
    for i, t in enumerate([190.0, 180.0, 200.0])
]  # fmt: skip
FAILED = with_status(
    run_row(run_id="ddp-n2-r3", repeat=3, gpus=2, global_batch=16), "failed", "exitcode : 3"
)
HOROVOD_ROWS = [
    run_row(run_id="hvd-n1", launcher="horovod", throughput=95.0),
    run_row(run_id="hvd-n2", launcher="horovod", gpus=2, throughput=171.0),
]


def probe(gpus: int, algbw_gbps: float) -> ProbeRow:
    return ProbeRow(
        sweep_id="s", probe_id=f"allreduce-n{gpus}", status="ok", error="", started_at="t",
        gpus=gpus, nodes=1, gpus_per_node=gpus, hosts=f"localhost:{gpus}", device="cpu",
        backend="gloo", interconnect="loopback (gloo)", nbytes=100_000_000, iterations=5,
        time_s=0.1, algbw_gbps=algbw_gbps, busbw_gbps=algbw_gbps,
    )  # fmt: skip


def test_summary_of_known_rows() -> None:
    # 102.228128 MB of gradients at 1.02228128 GB/s take 0.1 s > 0.08 s of compute:
    # ceiling 0.08 / 0.1 = 0.8; without overlap 0.08 / 0.18
    points = report.summarise([*DDP_ROWS, FAILED], [probe(2, 1.02228128)])
    one, two = points
    assert (one.gpus, one.runs_ok, one.runs_total) == (1, 3, 3)
    assert one.throughput == pytest.approx(100.0)
    assert (one.speedup, one.efficiency, one.comm_ceiling) == (1.0, 1.0, 1.0)
    assert (two.gpus, two.runs_ok, two.runs_total, two.global_batch) == (2, 3, 4, 16)
    assert two.throughput == pytest.approx(190.0)
    assert two.throughput_per_gpu == pytest.approx(95.0)
    assert two.speedup == pytest.approx(1.9)
    assert two.efficiency == pytest.approx(0.95)
    assert 180 / 220 <= two.efficiency_ci.low < 0.95 < two.efficiency_ci.high <= 200 / 180
    assert 180 <= two.throughput_ci.low < 190 < two.throughput_ci.high <= 200
    assert two.comm_ceiling == pytest.approx(0.8)
    assert two.comm_serial == pytest.approx(0.08 / 0.18)
    assert two.step_time_s == pytest.approx(0.09)


def test_fp16_allreduce_halves_the_bytes_in_the_ceiling() -> None:
    rows = [dataclasses.replace(r, fp16_allreduce=True) for r in DDP_ROWS]
    two = report.summarise(rows, [probe(2, 1.02228128)])[1]
    assert two.comm_ceiling == 1.0  # 0.05 s of allreduce hides behind 0.08 s of compute


def test_no_probe_no_ceiling_no_baseline_no_efficiency() -> None:
    two = report.summarise(DDP_ROWS[3:], [])[0]
    assert two.throughput == pytest.approx(190.0)
    for value in (two.speedup, two.efficiency, two.comm_ceiling):
        assert value != value  # NaN: nothing to compare against


def test_markdown_for_a_cpu_sweep() -> None:
    meta = {
        "sweep_id": "s1", "state": "complete", "started_at": "t", "elapsed_s": 60.0,
        "config": {"device": "cpu", "model": "resnet50", "batch_size": 8, "image_size": 32,
                   "data": "synthetic", "warmup_steps": 2, "steps": 8, "repeats": 3,
                   "dataset_size": 1_281_167, "claim": [[1, 560.0], [4, 148.0]]},
        "system": {"host": "vm"},
    }  # fmt: skip
    text = report.markdown(meta, [*DDP_ROWS, FAILED, *HOROVOD_ROWS], [probe(2, 1.02228128)])
    assert "CPU SMOKE TEST: NOT GPU RESULTS" in text
    assert "| ddp | fp32-nchw | 2 | 1 | 16 | 190.0 (" in text
    assert "| 95.0 | 1.90x | 95.0 % (" in text
    assert "| 80.0 % |" in text  # the allreduce ceiling
    assert "3/4" in text  # runs ok at 2 GPUs
    assert "| fp32-nchw | 2 | 190.0 | 171.0 | 0.900 |" in text  # Horovod / DDP
    assert "| ddp-n2-r3 | failed | exitcode : 3 |" in text
    assert "do not apply" in text  # no GPU: no published figures, no FLOP bound
    # epoch projection: 1,281,167 images at 100 img/s
    assert "| ddp | fp32-nchw | 1 | 12,812 |" in text
    # the claim of ANCHORS.md: 2,287.8 img/s implied on one GPU, 10.7 s that does not scale
    assert "| 1 | 560 | 2,287.8 | 2,287.8 |" in text
    assert "T(N) = 10.7 + 549.3/N s" in text
    assert "weak scaling" in text


def test_reference_section_on_a_gpu_flags_impossible_results() -> None:
    gpu = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "precision": "amp-bf16",
           "variant": "amp-bf16-nchw", "image_size": 224}  # fmt: skip
    rows = [
        run_row(run_id="a", throughput=2500.0, **gpu),
        run_row(run_id="b", gpus=2, throughput=100_000.0, **gpu),  # 50k per GPU > 40.2k bound
    ]
    lines = "\n".join(report.reference_section(rows, report.summarise(rows, [])))
    assert "H100 SXM" in lines
    assert "| ddp | amp-bf16-nchw | 1 | 2,500.0 | 40,220 | 6.2 % |" in lines
    # nearest published figure: Lambda's 1-GPU H100 run; MLPerf's 7,160 img/s per GPU is the ceiling
    assert "2,791.0 (Lambda deeplearning-benchmark, 1 GPU) | 89.6 % | 34.9 % |" in lines
    assert "ABOVE THE FLOP BOUND" in lines
    assert "MLPerf Training v4.0" in lines


def test_markdown_for_a_gpu_sweep_has_no_cpu_banner() -> None:
    meta = {"config": {"device": "cuda", "dataset_size": 100}, "system": {}}
    rows = [run_row(device="cuda", device_name="NVIDIA A40")]
    assert "CPU SMOKE TEST" not in report.markdown(meta, rows, [])


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
    report.plot_throughput(points, tmp_path / "t.png", cpu=True)
    report.plot_efficiency(points, tmp_path / "e.png", cpu=True)
    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "e.png").stat().st_size > 0


def point(**overrides: object) -> report.ScalingPoint:
    base = dict(
        launcher="ddp", variant="fp32-nchw", gpus=4, nodes=1, batch_per_gpu=8, global_batch=32,
        runs_ok=3, runs_total=3, throughput=360.0, throughput_ci=report.stats.Interval(355, 365),
        throughput_per_gpu=90.0, speedup=3.6, efficiency=0.9,
        efficiency_ci=report.stats.Interval(0.88, 0.92), step_time_s=0.1,
        data_wait_fraction=0.0, comm_ceiling=1.0, comm_serial=0.8,
    )  # fmt: skip
    base.update(overrides)
    return report.ScalingPoint(**base)  # type: ignore[arg-type]


def test_observations_explain_the_gap() -> None:
    assert report.observations([point()], []) == []
    ceiling = report.observations([point(efficiency=0.78, comm_ceiling=0.8)], [])
    assert len(ceiling) == 1 and "communication-bound" in ceiling[0]
    below = report.observations([point(efficiency=0.6, comm_ceiling=1.0)], [])
    assert "well below the allreduce ceiling" in below[0]
    superlinear = report.observations(
        [point(efficiency=1.3, efficiency_ci=report.stats.Interval(1.2, 1.4))], []
    )
    assert "above 100 %" in superlinear[0]
    unprobed = report.observations([point(efficiency=0.5, comm_ceiling=float("nan"))], [])
    assert "no allreduce probe" in unprobed[0]
    starved = report.observations([point(data_wait_fraction=0.2)], [])
    assert "input-bound: 20.0 %" in starved[0]
    noisy = report.observations([point(throughput_ci=report.stats.Interval(300, 420))], [])
    assert "noisy" in noisy[0]
    rows = [
        run_row(gpus=4, rank_imbalance=0.3, throttle_reasons="gpu_idle,sw_power_cap"),
        run_row(gpus=4, rank_imbalance=0.2),
    ]
    notes = report.observations([point()], rows)
    assert any("stragglers: the slowest rank took 25.0 % longer" in n for n in notes)
    assert any("clocks were held down (sw_power_cap)" in n for n in notes)

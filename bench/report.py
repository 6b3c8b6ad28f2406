"""Reporting: report.md and two PNG plots from a results directory.

`python -m bench.report RESULTS_DIR` rewrites them from the stored rows at any time (the sweep
calls `write_report` when it ends or is interrupted). Summaries are computed by `summarise`
from the rows alone, so the report never shows a number the rows do not support.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench import reference, stats
from bench.results import ResultStore
from bench.schema import ProbeRow, RunRow, Status
from bench.sysinfo import SLOWDOWN_REASONS

CPU_BANNER = (
    '> **CPU SMOKE TEST: NOT GPU RESULTS.** No CUDA GPU was used: every "GPU" below is a CPU\n'
    "> process (gloo backend) training on tiny images. These figures only show that the harness,\n"
    "> launchers and reporting work. Never compare them with GPU numbers or published figures."
)


@dataclass(frozen=True)
class ScalingPoint:
    launcher: str
    variant: str
    gpus: int
    nodes: int
    batch_per_gpu: int
    global_batch: int
    runs_ok: int
    runs_total: int
    throughput: float
    throughput_ci: stats.Interval
    throughput_per_gpu: float
    speedup: float
    efficiency: float
    efficiency_ci: stats.Interval
    step_time_s: float
    data_wait_fraction: float
    comm_ceiling: float
    comm_serial: float


NAN_CI = stats.Interval(math.nan, math.nan)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def allreduce_time(
    probes: Sequence[ProbeRow], gpus: int, gradient_bytes: float, nodes: int = 1
) -> float | None:
    """Seconds to allreduce `gradient_bytes` at the bandwidth the probe measured for `gpus`
    spread over `nodes` (the same GPU count over more nodes crosses the network)."""
    for p in probes:
        if (p.gpus, p.nodes) == (gpus, nodes) and p.status == Status.OK.value and p.algbw_gbps:
            return stats.allreduce_seconds(gradient_bytes, p.algbw_gbps * 1e9)
    return None


def summarise(runs: Sequence[RunRow], probes: Sequence[ProbeRow]) -> list[ScalingPoint]:
    """One point per (launcher, variant, GPU count, node count), in that order."""
    points = []
    series = sorted({(r.launcher, r.variant) for r in runs})
    for launcher, variant in series:
        rows = [r for r in runs if (r.launcher, r.variant) == (launcher, variant)]
        ok = [r for r in rows if r.status == Status.OK.value and r.throughput is not None]
        base = [r for r in ok if r.gpus == 1]
        base_tputs = [r.throughput for r in base if r.throughput is not None]
        base_step = _mean([r.step_time_median_s for r in base if r.step_time_median_s])
        for gpus, nodes in sorted({(r.gpus, r.nodes) for r in rows}):
            at_n = [r for r in rows if (r.gpus, r.nodes) == (gpus, nodes)]
            good = [r for r in ok if (r.gpus, r.nodes) == (gpus, nodes)]
            tputs = [r.throughput for r in good if r.throughput is not None]
            mean_n = _mean(tputs)
            mean_1 = _mean(base_tputs)
            ceiling = serial = math.nan
            if gpus == 1:
                ceiling = serial = 1.0
            elif good and base and not math.isnan(base_step):
                grads = _mean([r.gradient_mb * 1e6 for r in good if r.gradient_mb])
                if good[0].fp16_allreduce:
                    grads /= 2
                # compute per step shrinks with the per-GPU batch under strong scaling
                step = base_step * good[0].batch_per_gpu / base[0].batch_per_gpu
                comm = allreduce_time(probes, gpus, grads, nodes)
                if comm is not None:
                    ceiling = stats.comm_ceiling(step, comm)
                    serial = stats.comm_serial_estimate(step, comm)
            have_base = bool(base_tputs) and bool(tputs)
            points.append(
                ScalingPoint(
                    launcher=launcher,
                    variant=variant,
                    gpus=gpus,
                    nodes=nodes,
                    batch_per_gpu=at_n[0].batch_per_gpu,
                    global_batch=at_n[0].global_batch,
                    runs_ok=len(good),
                    runs_total=len(at_n),
                    throughput=mean_n,
                    throughput_ci=stats.bootstrap_ci(tputs) if tputs else NAN_CI,
                    throughput_per_gpu=mean_n / gpus,
                    speedup=stats.speedup(mean_n, mean_1) if have_base else math.nan,
                    efficiency=stats.efficiency(mean_n, gpus, mean_1) if have_base else math.nan,
                    efficiency_ci=(
                        stats.efficiency_ci(tputs, gpus, base_tputs) if have_base else NAN_CI
                    ),
                    step_time_s=_mean([r.step_time_median_s for r in good if r.step_time_median_s]),
                    data_wait_fraction=_mean(
                        [r.data_wait_fraction for r in good if r.data_wait_fraction is not None]
                    ),
                    comm_ceiling=ceiling,
                    comm_serial=serial,
                )
            )
    return points


def observations(points: Sequence[ScalingPoint], runs: Sequence[RunRow]) -> list[str]:
    """Plain-language reasons the scaling is not linear (or looks too good), from the numbers."""
    notes = []
    for p in points:
        label = f"{p.launcher} {p.variant} at {p.gpus} GPU" + ("s" if p.gpus > 1 else "")
        if p.nodes > 1:
            label += f" on {p.nodes} nodes"
        rows = [
            r
            for r in runs
            if (r.launcher, r.variant, r.gpus, r.nodes) == (p.launcher, p.variant, p.gpus, p.nodes)
            and r.status == Status.OK.value
        ]
        if p.gpus > 1 and p.efficiency_ci.low > 1.02:
            notes.append(
                f"{label}: efficiency {_pct(p.efficiency)} is above 100 %: the 1-GPU baseline ran "
                "slower than it should (a busy machine, a cold cache) or the work per GPU differs."
            )
        if p.gpus > 1 and p.comm_ceiling < 0.95 and p.efficiency >= p.comm_ceiling - 0.05:
            notes.append(
                f"{label}: communication-bound: efficiency {_pct(p.efficiency)} is at the "
                f"allreduce ceiling ({_pct(p.comm_ceiling)}). A faster interconnect, "
                "--fp16-allreduce or a larger per-GPU batch would raise it."
            )
        elif p.gpus > 1 and p.efficiency < p.comm_ceiling - 0.10:
            notes.append(
                f"{label}: efficiency {_pct(p.efficiency)} is well below the allreduce ceiling "
                f"({_pct(p.comm_ceiling)}): communication does not overlap the backward pass, or "
                "something else (input, stragglers, host overhead) bounds the step."
            )
        elif p.gpus > 1 and math.isnan(p.comm_ceiling) and p.efficiency < 0.9:
            notes.append(
                f"{label}: efficiency {_pct(p.efficiency)} with no allreduce probe to compare "
                "against (drop --no-probe to see whether communication explains it)."
            )
        if p.data_wait_fraction > 0.05:
            notes.append(
                f"{label}: input-bound: {_pct(p.data_wait_fraction)} of the timed window was "
                "spent waiting for batches (raise --workers or use faster storage)."
            )
        imbalance = _mean([r.rank_imbalance for r in rows if r.rank_imbalance is not None])
        if imbalance > 0.10:
            notes.append(
                f"{label}: stragglers: the slowest rank took {_pct(imbalance)} longer than the "
                "fastest, and every step waits for it."
            )
        throttled = sorted(
            {t for r in rows for t in r.throttle_reasons.split(",") if t in SLOWDOWN_REASONS}
        )
        if throttled:
            notes.append(f"{label}: GPU clocks were held down ({', '.join(throttled)}).")
        if p.runs_ok > 1 and p.throughput_ci.high - p.throughput_ci.low > 0.1 * p.throughput:
            notes.append(
                f"{label}: noisy: the 95 % interval spans more than 10 % of the mean over "
                f"{p.runs_ok} repeats; use more --repeats or a quieter machine."
            )
    return notes


def _num(value: float, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f} %"


def _ci(interval: stats.Interval, percent: bool = False) -> str:
    fmt = _pct if percent else _num
    if math.isnan(interval.low):
        return ""
    return f" ({fmt(interval.low)} to {fmt(interval.high)})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def scaling_table(points: Sequence[ScalingPoint]) -> list[str]:
    rows = [
        [
            p.launcher, p.variant, str(p.gpus), str(p.nodes), str(p.global_batch),
            _num(p.throughput) + _ci(p.throughput_ci), _num(p.throughput_per_gpu),
            _num(p.speedup, 2) + ("x" if not math.isnan(p.speedup) else ""),
            _pct(p.efficiency) + _ci(p.efficiency_ci, percent=True),
            _pct(p.comm_ceiling), _num(p.step_time_s * 1e3, 1), _pct(p.data_wait_fraction),
            f"{p.runs_ok}/{p.runs_total}",
        ]
        for p in points
    ]  # fmt: skip
    header = [
        "launcher", "variant", "GPUs", "nodes", "global batch", "img/s (95% CI)",
        "img/s per GPU", "speed-up", "efficiency (95% CI)", "allreduce ceiling",
        "step ms (median)", "data wait", "runs ok",
    ]  # fmt: skip
    return _table(header, rows)


def launcher_comparison(points: Sequence[ScalingPoint]) -> list[str]:
    by_key = {(p.launcher, p.variant, p.gpus, p.nodes): p for p in points}
    rows = []
    for (launcher, variant, gpus, nodes), ddp in sorted(by_key.items()):
        hvd = by_key.get(("horovod", variant, gpus, nodes))
        if launcher != "ddp" or hvd is None:
            continue
        ratio = hvd.throughput / ddp.throughput if ddp.throughput else math.nan
        where = str(gpus) if nodes == 1 else f"{gpus} ({nodes} nodes)"
        rows.append([variant, where, _num(ddp.throughput), _num(hvd.throughput), _num(ratio, 3)])
    if not rows:
        return []
    return _table(["variant", "GPUs", "DDP img/s", "Horovod img/s", "Horovod / DDP"], rows)


def probe_table(probes: Sequence[ProbeRow]) -> list[str]:
    rows = [
        [
            str(p.gpus), p.hosts, p.backend, p.interconnect or p.status,
            f"{p.nbytes / 1e6:.0f} MB", _num((p.time_s or math.nan) * 1e3, 2),
            _num(p.algbw_gbps or math.nan, 2), _num(p.busbw_gbps or math.nan, 2),
        ]
        for p in sorted(probes, key=lambda p: p.gpus)
    ]  # fmt: skip
    header = ["GPUs", "hosts", "backend", "interconnect", "size", "ms", "algbw GB/s", "busbw GB/s"]
    return _table(header, rows)


def reference_section(runs: Sequence[RunRow], points: Sequence[ScalingPoint]) -> list[str]:
    ok = [r for r in runs if r.status == Status.OK.value]
    if not ok or ok[0].device != "cuda":
        return ["No GPU in this sweep: published GPU figures and the FLOP bound do not apply."]
    name = ok[0].device_name
    gpu = reference.identify_gpu(name)
    if gpu is None:
        return [f"{name}: no published figures or datasheet peak on file."]
    lines = [f"Detected **{name}** (datasheet: {gpu.name})."]
    rows = []
    for p in points:
        if math.isnan(p.throughput_per_gpu):
            continue
        sample = next(r for r in ok if (r.launcher, r.variant) == (p.launcher, p.variant))
        peak = reference.peak_flops(gpu, sample.precision)
        flops = reference.flops_per_image(sample.model, sample.image_size)
        bound = stats.flop_bound_images_per_s(peak, flops) if peak and flops else math.nan
        utilisation = p.throughput_per_gpu / bound  # NaN where the bound is unknown
        published = reference.published_for(gpu, sample.precision)
        peer = reference.nearest_published(published, p.gpus)
        ceiling = next((x for x in published if x.ceiling), None)
        verdict = " **ABOVE THE FLOP BOUND: measurement bug**" if utilisation > 1 else ""
        peer_text = (
            f"{_num(peer.images_per_s_per_gpu)} ({peer.source}, {peer.gpus} GPU)"
            if peer
            else "none"
        )
        rows.append(
            [
                p.launcher,
                p.variant,
                str(p.gpus),
                _num(p.throughput_per_gpu),
                _num(bound, 0),
                _pct(utilisation) + verdict,
                peer_text,
                _pct(p.throughput_per_gpu / peer.images_per_s_per_gpu) if peer else "n/a",
                _pct(p.throughput_per_gpu / ceiling.images_per_s_per_gpu) if ceiling else "n/a",
            ]
        )
    header = [
        "launcher", "variant", "GPUs", "img/s per GPU", "FLOP bound img/s", "of FLOP bound",
        "published per GPU (nearest GPU count)", "measured / published", "of MLPerf per GPU",
    ]  # fmt: skip
    lines += ["", *_table(header, rows)]
    lines += ["", "Published figures for this GPU:", ""]
    lines += _table(
        ["source", "precision", "batch/GPU", "GPUs", "img/s per GPU", "note"],
        [
            [p.source, p.precision, str(p.batch_per_gpu or "?"), str(p.gpus),
             _num(p.images_per_s_per_gpu), p.note]
            for p in reference.PUBLISHED if p.gpu == gpu.name.split()[0]
        ],
    )  # fmt: skip
    return lines


def epoch_section(
    points: Sequence[ScalingPoint], dataset_size: int, claim: Sequence[Sequence[float]]
) -> list[str]:
    lines = [f"Seconds per epoch of {dataset_size:,} images at the measured throughput.", ""]
    rows = []
    for launcher, variant in sorted({(p.launcher, p.variant) for p in points}):
        series = [
            p for p in points
            if (p.launcher, p.variant) == (launcher, variant) and not math.isnan(p.throughput)
        ]  # fmt: skip
        for p in series:
            rows.append([launcher, variant, str(p.gpus),
                         _num(stats.epoch_seconds(dataset_size, p.throughput), 0), ""])  # fmt: skip
        if len({p.gpus for p in series}) >= 2:
            fit = stats.fit_epoch_model(
                [p.gpus for p in series],
                [stats.epoch_seconds(dataset_size, p.throughput) for p in series],
            )
            rows.append([launcher, variant, "fit", "",
                         f"T(N) = {fit.fixed_s:,.1f} + {fit.scalable_s:,.1f}/N s"])  # fmt: skip
    lines += _table(["launcher", "variant", "GPUs", "s/epoch", "model"], rows)
    if claim:
        lines += ["", "### Claim check", ""]
        claim_rows = []
        for gpus, seconds in claim:
            implied = stats.throughput(dataset_size, seconds)
            claim_rows.append(
                [str(int(gpus)), _num(seconds, 0), _num(implied), _num(implied / gpus)]
            )
        lines += _table(["GPUs", "claimed s/epoch", "implied img/s", "implied img/s per GPU"],
                        claim_rows)  # fmt: skip
        if len({g for g, _ in claim}) >= 2:
            fit = stats.fit_epoch_model([int(g) for g, _ in claim], [s for _, s in claim])
            lines += [
                "",
                f"The claim fits T(N) = {fit.fixed_s:,.1f} + {fit.scalable_s:,.1f}/N s: "
                f"{fit.fixed_s:,.1f} s of each epoch does not shrink with more GPUs. Compare the "
                "implied per-GPU rate with the FLOP bound and published figures above: a rate "
                "above them means the epoch was not the stated dataset size.",
            ]
    return lines


def failures_section(runs: Sequence[RunRow], probes: Sequence[ProbeRow]) -> list[str]:
    bad = [r for r in runs if r.status != Status.OK.value]
    bad_probes = [p for p in probes if p.status != Status.OK.value]
    if not bad and not bad_probes:
        return ["None: every run finished and reported."]
    rows = [[r.run_id, r.status, "<br>".join(_escape(r.error).splitlines())] for r in bad]
    rows += [[p.probe_id, p.status, "<br>".join(_escape(p.error).splitlines())] for p in bad_probes]
    return _table(["run", "status", "key lines"], rows)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def system_section(meta: dict[str, Any]) -> list[str]:
    system = meta.get("system", {})
    versions = system.get("versions", {})
    hvd = system.get("horovod", {})
    nvml = system.get("nvml", {})
    git = system.get("git", {})
    ops = "" if versions.get("torchvision_compiled_ops", True) else " (models only, no ops)"
    if hvd.get("available"):
        horovod = f"{hvd.get('version')} (NCCL: {hvd.get('nccl_built')})"
    else:
        horovod = f"unavailable ({hvd.get('reason')})"
    lines = [
        f"- host: {system.get('host')} ({system.get('platform')}), CPU: {system.get('cpu')}, "
        f"{system.get('cores')} cores, {system.get('memory_gb')} GB",
        f"- GPUs: {system.get('gpu_count')} x {system.get('gpu_name') or 'none'}; "
        f"driver {nvml.get('driver', 'n/a')}",
        f"- torch {versions.get('torch')} (CUDA {versions.get('torch_cuda')}, cuDNN "
        f"{versions.get('cudnn', 'n/a')}, NCCL {versions.get('nccl', 'n/a')}), torchvision "
        f"{versions.get('torchvision')}{ops}",
        f"- Horovod: {horovod}",
        f"- git: {git.get('sha')}" + (" (uncommitted changes)" if git.get("dirty") else ""),
        f"- environment: {system.get('environment') or 'no NCCL_/GLOO_/HOROVOD_ variables set'}",
    ]
    for gpu in nvml.get("gpus", []):
        lines.append(
            f"- GPU {gpu['index']}: {gpu['name']} {gpu['memory_gb']} GB, bus {gpu['pci_bus_id']}, "
            f"power limit {gpu.get('power_limit_w')} W, "
            f"max SM clock {gpu.get('max_sm_clock_mhz')} MHz"
        )
    if system.get("topology"):
        lines += ["", "```", system["topology"].rstrip(), "```"]
    return lines


def telemetry_section(runs: Sequence[RunRow]) -> list[str]:
    ok = [r for r in runs if r.status == Status.OK.value and r.sm_clock_mhz_mean is not None]
    if not ok:
        return ["No GPU telemetry (no NVML on this machine)."]
    rows = [
        [r.run_id, _num(r.sm_clock_mhz_mean, 0), _num(r.sm_clock_mhz_min or math.nan, 0),
         _num(r.power_w_mean or math.nan, 0), _num(r.temperature_c_max or math.nan, 0),
         r.throttle_reasons or "none"]
        for r in ok
    ]  # fmt: skip
    return _table(
        ["run", "SM MHz mean", "SM MHz min", "power W mean", "max temp C", "clock-event reasons"],
        rows,
    )


def markdown(meta: dict[str, Any], runs: Sequence[RunRow], probes: Sequence[ProbeRow]) -> str:
    config = meta.get("config", {})
    system = meta.get("system", {})
    points = summarise(runs, probes)
    cpu = config.get("device") == "cpu"
    scaling = (
        f"strong scaling: global batch fixed at {config.get('global_batch')}"
        if config.get("global_batch")
        else f"weak scaling: per-GPU batch fixed at {config.get('batch_size')}, "
        "global batch = per-GPU batch x GPUs"
    )
    title = f"# {config.get('model', 'model')} training scaling on {system.get('host', '?')}"
    lines = [title, ""]
    if cpu:
        lines += [CPU_BANNER, ""]
    lines += [
        f"Sweep `{meta.get('sweep_id')}`: {meta.get('state')}, started {meta.get('started_at')}, "
        f"{_num(meta.get('elapsed_s', math.nan), 0)} s. Device: "
        f"{'CPU processes (gloo)' if cpu else system.get('gpu_name')}. {config.get('model')} at "
        f"{config.get('image_size')}x{config.get('image_size')}, {scaling}; data: "
        f"{config.get('data')}; {config.get('warmup_steps')} warm-up steps (excluded) + "
        f"{config.get('steps')} timed steps per run; {config.get('repeats')} launches per "
        "configuration. Every knob is a column of runs.csv.",
        "",
        "## Throughput and scaling",
        "",
        *scaling_table(points),
        "",
        "img/s = images in the timed window / the slowest rank's window; efficiency = "
        "img/s(N) / (N x img/s(1)); 95% intervals are percentile bootstraps over the repeats. "
        "The allreduce ceiling is the best efficiency the measured allreduce bandwidth allows for "
        "this model's gradients if communication overlaps compute perfectly.",
        "",
        "![throughput](throughput.png)",
        "",
        "![efficiency](efficiency.png)",
        "",
    ]
    notes = observations(points, runs)
    lines += ["## Why not linear?", ""]
    lines += [f"- {n}" for n in notes] if notes else ["Nothing stands out."]
    lines += [""]
    comparison = launcher_comparison(points)
    if comparison:
        lines += ["## DDP vs Horovod", "", *comparison, ""]
    lines += ["## Allreduce probe", ""]
    lines += probe_table(probes) if probes else ["No probe (single rank, or --no-probe)."]
    lines += ["", "busbw = algbw x 2(n-1)/n (nccl-tests' definition).", ""]
    lines += ["## Comparison with published figures and the FLOP bound", ""]
    lines += [*reference_section(runs, points), ""]
    lines += ["## Epoch-time projection", ""]
    epochs = epoch_section(points, config.get("dataset_size", 0), config.get("claim", ()))
    lines += [*epochs, ""]
    lines += ["## GPU telemetry (timed window)", "", *telemetry_section(runs), ""]
    lines += ["## Failures", "", *failures_section(runs, probes), ""]
    lines += ["## System", "", *system_section(meta), ""]
    return "\n".join(lines)


def _series_style(points: Sequence[ScalingPoint]) -> dict[tuple[str, str], str]:
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    keys = sorted({(p.launcher, p.variant) for p in points})
    return {k: colours[i % len(colours)] for i, k in enumerate(keys)}


def _title(base: str, cpu: bool) -> str:
    return base + ("\nCPU SMOKE TEST: NOT GPU RESULTS" if cpu else "")


def plot_throughput(points: Sequence[ScalingPoint], path: Path, cpu: bool) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colour = _series_style(points)
    for key, c in colour.items():
        series = [
            p for p in points if (p.launcher, p.variant) == key and not math.isnan(p.throughput)
        ]
        if not series:
            continue
        xs = [p.gpus for p in series]
        ys = [p.throughput for p in series]
        err = [
            [max(0.0, p.throughput - p.throughput_ci.low) for p in series],
            [max(0.0, p.throughput_ci.high - p.throughput) for p in series],
        ]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=c, label=f"{key[0]} {key[1]}")
        one = next((p for p in series if p.gpus == 1), None)
        if one is not None:
            ax.plot(xs, [one.throughput * n for n in xs], "--", color=c, alpha=0.5,
                    label=f"ideal ({key[0]})")  # fmt: skip
    _finish(ax, points, "images/s", _title("Training throughput vs GPUs", cpu))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_efficiency(points: Sequence[ScalingPoint], path: Path, cpu: bool) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colour = _series_style(points)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ideal")
    for key, c in colour.items():
        series = [
            p for p in points if (p.launcher, p.variant) == key and not math.isnan(p.efficiency)
        ]
        if not series:
            continue
        xs = [p.gpus for p in series]
        err = [
            [max(0.0, p.efficiency - p.efficiency_ci.low) for p in series],
            [max(0.0, p.efficiency_ci.high - p.efficiency) for p in series],
        ]
        ax.errorbar(xs, [p.efficiency for p in series], yerr=err, marker="o", capsize=3,
                    color=c, label=f"{key[0]} {key[1]}")  # fmt: skip
        capped = [p for p in series if not math.isnan(p.comm_ceiling)]
        if len(capped) > 1:
            ax.plot([p.gpus for p in capped], [p.comm_ceiling for p in capped], ":", color=c,
                    marker="^", label=f"allreduce ceiling ({key[0]})")  # fmt: skip
    ax.set_ylim(bottom=0, top=max(1.1, ax.get_ylim()[1]))
    _finish(ax, points, "efficiency T(N) / (N T(1))", _title("Scaling efficiency vs GPUs", cpu))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _finish(ax: Any, points: Sequence[ScalingPoint], ylabel: str, title: str) -> None:
    counts = sorted({p.gpus for p in points})
    if counts:
        ax.set_xticks(counts)
    ax.set_xlabel("GPUs" + (" (CPU ranks)" if "CPU" in title else ""))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no successful runs", ha="center", va="center", transform=ax.transAxes)


def write_report(directory: Path) -> Path:
    store = ResultStore(directory)
    meta = store.read_meta()
    runs, probes = store.runs.rows(), store.probes.rows()
    cpu = meta.get("config", {}).get("device") == "cpu"
    points = summarise(runs, probes)
    plot_throughput(points, directory / "throughput.png", cpu)
    plot_efficiency(points, directory / "efficiency.png", cpu)
    path = directory / "report.md"
    path.write_text(markdown(meta, runs, probes))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rewrite report.md and plots from a sweep.")
    parser.add_argument("directory", type=Path)
    print(write_report(parser.parse_args(argv).directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

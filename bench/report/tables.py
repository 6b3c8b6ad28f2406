"""Markdown tables: number formatting and the tables built from summary points and rows.

The scaling table names the statistic of every column in its header; docs/results/README.md
explains the same headers (a unit test keeps the two in step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from bench import stats
from bench.launcher_kinds import DDP, DP, HOROVOD, LAUNCHER_KINDS, TF
from bench.report.summary import ScalingPoint
from bench.schema import ProbeRow, RunRow, Status


def num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f} %"


def interval(ci: stats.Interval, runs_ok: int, percent: bool = False) -> str:
    """ " (low to high)", or why there is none: one launch says nothing about the spread."""
    if ci.defined:
        fmt = pct if percent else num
        return f" ({fmt(ci.low)} to {fmt(ci.high)})"
    return " (1 launch: no interval)" if runs_ok == 1 else ""


def signed_terms(fixed: float, scalable: float, digits: int = 1) -> str:
    """a + b/N with the sign of b written once: "10.0 - 5.0/N", never "10.0 + -5.0/N"."""
    sign = "-" if scalable < 0 else "+"
    return f"{fixed:,.{digits}f} {sign} {abs(scalable):,.{digits}f}/N"


def escape(text: str) -> str:
    return text.replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


Column = tuple[str, Callable[[Any], Any]]  # (header, the cell of one item)


def column_table(columns: Sequence[Column], items: Iterable[Any]) -> list[str]:
    """A table declared once per column: each header beside how its cell is made."""
    return table([h for h, _ in columns], ([cell(x) for _, cell in columns] for x in items))


def scaling_columns(cpu: bool) -> list[Column]:
    """Each column and the statistic it shows; the same words as docs/results/README.md."""
    return [
        ("launcher", lambda p: p.launcher),
        ("variant", lambda p: p.variant),
        ("ranks" if cpu else "GPUs", lambda p: p.gpus),
        ("nodes", lambda p: p.nodes),
        ("global batch", lambda p: p.global_batch),
        ("placement", lambda p: p.placement),
        (
            "img/s (mean of launches, 95 % CI)",
            lambda p: num(p.throughput) + interval(p.throughput_ci, p.runs_ok),
        ),
        (
            f"img/s per {'rank' if cpu else 'GPU'} (mean of launches)",
            lambda p: num(p.throughput_per_gpu),
        ),
        ("speed-up (ideal)", _speedup),
        ("efficiency vs ideal (95 % CI)", _efficiency),
        ("allreduce ceiling", lambda p: pct(p.comm_ceiling)),
        (
            "step ms (mean of launches of the per-launch median step)",
            lambda p: num(p.step_time_s * 1e3, 1),
        ),
        ("data wait (mean of launches)", lambda p: pct(p.data_wait_fraction)),
        ("CV of img/s", lambda p: pct(p.cv)),
        ("runs ok", lambda p: f"{p.runs_ok}/{p.runs_total}"),
    ]


def scaling_header(cpu: bool) -> list[str]:
    return [h for h, _ in scaling_columns(cpu)]


def _speedup(p: ScalingPoint) -> str:
    if math.isnan(p.speedup):
        return "n/a"
    return f"{p.speedup:.2f}x ({p.ideal_speedup:.2f}x)"


def _efficiency(p: ScalingPoint) -> str:
    if p.gpus == 1 and not math.isnan(p.efficiency):
        return pct(p.efficiency) + " (the baseline)"
    return pct(p.efficiency) + interval(p.efficiency_ci, p.runs_ok, percent=True)


def scaling_table(points: Sequence[ScalingPoint]) -> list[str]:
    return column_table(scaling_columns(any(p.cpu for p in points)), points)


LAUNCHER_NAMES = {k.name: k.title for k in LAUNCHER_KINDS.values()}
# (numerator, denominator) ratios the comparison shows when both launchers ran
LAUNCHER_RATIOS = ((HOROVOD.name, DDP.name), (TF.name, DDP.name), (DDP.name, DP.name))


def launcher_comparison(points: Sequence[ScalingPoint]) -> list[str]:
    """img/s of every launcher side by side per variant and GPU count, with Horovod / DDP,
    TensorFlow / DDP and DDP / DataParallel (what DDP gains over the single-process baseline).
    Where each launcher ran one layout and they differ (a CPU sweep's default: each framework's
    own, LauncherKind.cpu_channels_last), the variant leaves the layout out and each launcher's
    header names its own."""
    present = [x for x in LAUNCHER_NAMES if any(p.launcher == x for p in points)]
    ratios = [(a, b) for a, b in LAUNCHER_RATIOS if a in present and b in present]
    if len(present) < 2:
        return []
    layouts = {x: {p.layout for p in points if p.launcher == x} for x in present}
    own = all(len(v) == 1 for v in layouts.values()) and len(set().union(*layouts.values())) > 1

    def variant_of(p: ScalingPoint) -> str:
        return p.variant.replace(f"-{p.layout}", "", 1) if own else p.variant

    by_key = {(p.launcher, variant_of(p), p.gpus, p.nodes): p for p in points}
    rows = []
    for variant, gpus, nodes in sorted({(variant_of(p), p.gpus, p.nodes) for p in points}):
        found = {x: by_key.get((x, variant, gpus, nodes)) for x in present}
        if sum(1 for p in found.values() if p is not None and p.runs_ok) < 2:
            continue
        where = str(gpus) if nodes == 1 else f"{gpus} ({nodes} nodes)"
        tput = {
            x: p.throughput if p is not None and p.runs_ok else math.nan for x, p in found.items()
        }
        cells = [num(tput[x]) for x in present]
        cells += [num(tput[a] / tput[b], 3) if tput[b] else "n/a" for a, b in ratios]
        rows.append([variant, where, *cells])
    if not rows:
        return []
    unit = "ranks" if any(p.cpu for p in points) else "GPUs"
    header = ["variant", unit]
    header += [
        f"{LAUNCHER_NAMES[x]} img/s{f' in {min(layouts[x])}' if own else ''} (mean of launches)"
        for x in present
    ]
    header += [f"{LAUNCHER_NAMES[a]} / {LAUNCHER_NAMES[b]}" for a, b in ratios]
    return table(header, rows)


def probe_table(probes: Sequence[ProbeRow]) -> list[str]:
    """Each probe's bandwidth, and nccl-tests' beside it where it ran (or why it did not)."""
    columns: list[Column] = [
        ("GPUs", lambda p: p.gpus),
        ("hosts", lambda p: p.hosts),
        ("backend", lambda p: p.backend),
        ("interconnect", lambda p: p.interconnect or p.status),
        ("size", lambda p: f"{p.nbytes / 1e6:.0f} MB"),
        ("ms (median)", lambda p: num((p.time_s or math.nan) * 1e3, 2)),
        ("algbw GB/s", lambda p: num(p.algbw_gbps or math.nan, 2)),
        ("busbw GB/s", lambda p: num(p.busbw_gbps or math.nan, 2)),
    ]
    if any(p.nccl_tests for p in probes):
        columns.append(("nccl-tests busbw GB/s (all_reduce_perf, same size)", _nccl_tests))
    return column_table(columns, sorted(probes, key=lambda p: p.gpus))


def _nccl_tests(p: ProbeRow) -> str:
    figure = p.nccl_tests_busbw_gbps
    return num(figure, 2) if figure is not None else escape(p.nccl_tests or "n/a")


def failures_section(runs: Sequence[RunRow], probes: Sequence[ProbeRow]) -> list[str]:
    bad = [r for r in runs if r.status != Status.OK.value]
    bad_probes = [p for p in probes if p.status != Status.OK.value]
    if not bad and not bad_probes:
        return ["None: every run finished and reported."]
    rows = [[r.run_id, r.status, "<br>".join(escape(r.error).splitlines())] for r in bad]
    rows += [[p.probe_id, p.status, "<br>".join(escape(p.error).splitlines())] for p in bad_probes]
    return table(["run", "status", "key lines"], rows)


def telemetry_section(runs: Sequence[RunRow]) -> list[str]:
    ok = [r for r in runs if r.status == Status.OK.value and r.sm_clock_mhz_mean is not None]
    if not ok:
        return ["No GPU telemetry (no NVML on this machine)."]
    return column_table(
        [
            ("run", lambda r: r.run_id),
            ("SM MHz mean", lambda r: num(r.sm_clock_mhz_mean, 0)),
            ("SM MHz min", lambda r: num(r.sm_clock_mhz_min or math.nan, 0)),
            ("power W mean", lambda r: num(r.power_w_mean or math.nan, 0)),
            ("max temp C", lambda r: num(r.temperature_c_max or math.nan, 0)),
            ("clock-event reasons", lambda r: r.throttle_reasons or "none"),
        ],
        ok,
    )


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

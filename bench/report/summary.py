"""From result rows to one summary point per configuration, each figure a named statistic.

Every point comes from the rows alone: the mean over a configuration's successful launches
(independent repeats) with a Student-t interval, the ideal speed-up for what the ranks actually
use (GPUs, or CPU cores = ranks x threads per rank), and the allreduce ceiling the probe allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench import stats
from bench.launcher_kinds import launcher_kind
from bench.schema import ProbeRow, RunRow, Status
from bench.spec import layout


@dataclass(frozen=True)
class ScalingPoint:
    launcher: str
    variant: str
    layout: str  # the --memory-format it ran (nchw, channels_last)
    gpus: int  # ranks: GPUs on a GPU sweep, CPU processes on a CPU one
    nodes: int
    batch_per_gpu: int
    global_batch: int
    runs_ok: int
    runs_total: int
    throughput: float  # mean of launches
    throughput_ci: stats.Interval
    throughput_per_gpu: float
    speedup: float
    efficiency: float  # speed-up / ideal speed-up
    efficiency_ci: stats.Interval
    step_time_s: float  # mean of launches of the per-launch median step
    data_wait_fraction: float  # mean of launches
    comm_ceiling: float
    comm_serial: float
    device: str = "cuda"
    threads_per_rank: int = 1
    ideal_speedup: float = math.nan  # N on GPUs; cores used at N / cores used at 1 on CPU
    cv: float = math.nan  # coefficient of variation of img/s over launches
    allreduce_s: float = math.nan  # probe-derived time to allreduce one step's gradients
    compute_s: float = math.nan  # estimated compute per step at this point
    rows: tuple[RunRow, ...] = field(default=(), repr=False, compare=False)  # launches that ran

    @property
    def cpu(self) -> bool:
        return self.device != "cuda"

    @property
    def ranks_per_node(self) -> int:
        return self.gpus // max(1, self.nodes)

    @property
    def shares_cores(self) -> bool:
        """CPU ranks on one host split its cores between them (and the allreduce)."""
        return self.cpu and self.ranks_per_node > 1 and launcher_kind(self.launcher).process_per_gpu

    @property
    def placement(self) -> str:
        gpus, threads = counted(self.gpus, "GPU"), counted(self.threads_per_rank, "thread")
        if not launcher_kind(self.launcher).process_per_gpu:  # one process, whatever it drives
            return f"1 process x {threads}" if self.cpu else f"1 process driving {gpus}"
        if not self.cpu:
            return gpus
        text = f"{counted(self.gpus, 'rank')} x {threads}"
        if self.shares_cores:
            cores = self.ranks_per_node * self.threads_per_rank
            text += f", sharing {cores} cores" + (" per node" if self.nodes > 1 else "")
        return text


def counted(n: int, noun: str) -> str:
    """ "1 GPU", "2 GPUs"."""
    return f"{n} {noun}" + ("s" if n > 1 else "")


def compute_units(row: RunRow) -> float:
    """What a run computes on: its GPUs, or on CPU the cores its ranks use."""
    return float(row.gpus if row.device == "cuda" else row.gpus * row.threads_per_rank)


def allreduce_time(
    probes: Sequence[ProbeRow], gpus: int, gradient_bytes: float, nodes: int = 1
) -> float | None:
    """Seconds to allreduce `gradient_bytes` at the bandwidth the probe measured for `gpus`
    spread over `nodes` (the same GPU count over more nodes crosses the network)."""
    for p in probes:
        if (p.gpus, p.nodes) == (gpus, nodes) and p.status == Status.OK.value and p.algbw_gbps:
            return gradient_bytes / (p.algbw_gbps * 1e9)
    return None


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


@dataclass(frozen=True)
class _Ceiling:
    ceiling: float = math.nan
    serial: float = math.nan
    allreduce_s: float = math.nan
    compute_s: float = math.nan


def _ceiling(
    good: Sequence[RunRow], base: Sequence[RunRow], probes: Sequence[ProbeRow]
) -> _Ceiling:
    """The best efficiency the measured allreduce allows at this point.

    Compute per step is the 1-rank median step scaled by the per-rank batch and, on CPU, by the
    threads each rank has. On GPUs NCCL moves gradients on its own links while the backward pass
    runs, so the ceiling assumes perfect overlap: t_c / max(t_c, t_ar). CPU ranks run gloo's
    allreduce on the very cores that compute, so the two add up: t_c / (t_c + t_ar).
    """
    first, one = good[0], base[0]
    if first.gpus == 1:
        return _Ceiling(1.0, 1.0, 0.0)
    base_step = stats.mean(_present([r.step_time_median_s for r in base]))
    grads = stats.mean(_present([r.gradient_mb for r in good])) * 1e6
    if math.isnan(base_step) or math.isnan(grads):
        return _Ceiling()
    if first.fp16_allreduce and launcher_kind(first.launcher).fp16_allreduce:
        grads /= 2
    step = base_step * first.batch_per_gpu / one.batch_per_gpu
    if first.device != "cuda":
        step *= one.threads_per_rank / first.threads_per_rank
    comm = allreduce_time(probes, first.gpus, grads, first.nodes)
    if comm is None:
        return _Ceiling(compute_s=step)
    serial = stats.comm_serial_estimate(step, comm)
    overlap = stats.comm_ceiling(step, comm)
    return _Ceiling(serial if first.device != "cuda" else overlap, serial, comm, step)


def _point(
    rows: Sequence[RunRow], base: Sequence[RunRow], probes: Sequence[ProbeRow]
) -> ScalingPoint:
    first = rows[0]
    good = [r for r in rows if r.status == Status.OK.value and r.throughput is not None]
    tputs = _present([r.throughput for r in good])
    base_tputs = _present([r.throughput for r in base])
    mean_n, mean_1 = stats.mean(tputs), stats.mean(base_tputs)
    have_base = bool(base_tputs) and bool(tputs)
    ideal = compute_units(good[0]) / compute_units(base[0]) if have_base else math.nan
    ceiling = _ceiling(good, base, probes) if have_base else _Ceiling()
    return ScalingPoint(
        launcher=first.launcher,
        variant=first.variant,
        layout=layout(first.channels_last),
        gpus=first.gpus,
        nodes=first.nodes,
        batch_per_gpu=first.batch_per_gpu,
        global_batch=first.global_batch,
        runs_ok=len(good),
        runs_total=len(rows),
        throughput=mean_n,
        throughput_ci=stats.t_interval(tputs, floor=0.0),
        throughput_per_gpu=mean_n / first.gpus,
        speedup=mean_n / mean_1 if have_base else math.nan,
        efficiency=stats.efficiency(mean_n, ideal, mean_1) if have_base else math.nan,
        efficiency_ci=(
            stats.efficiency_ci(tputs, ideal, base_tputs)
            if have_base and first.gpus > 1
            else (stats.Interval(1.0, 1.0) if have_base else stats.NO_INTERVAL)
        ),
        step_time_s=stats.mean(_present([r.step_time_median_s for r in good])),
        data_wait_fraction=stats.mean(_present([r.data_wait_fraction for r in good])),
        comm_ceiling=ceiling.ceiling,
        comm_serial=ceiling.serial,
        device=first.device,
        threads_per_rank=first.threads_per_rank,
        ideal_speedup=ideal,
        cv=stats.coefficient_of_variation(tputs),
        allreduce_s=ceiling.allreduce_s,
        compute_s=ceiling.compute_s,
        rows=tuple(good),
    )


def series(points: Sequence[ScalingPoint], attr: str) -> dict[tuple[str, str], list[ScalingPoint]]:
    """Each (launcher, variant)'s points where `attr` was measured, the keys in order."""
    out: dict[tuple[str, str], list[ScalingPoint]] = {}
    for p in points:
        if not math.isnan(getattr(p, attr)):
            out.setdefault((p.launcher, p.variant), []).append(p)
    return dict(sorted(out.items()))


def summarise(runs: Sequence[RunRow], probes: Sequence[ProbeRow]) -> list[ScalingPoint]:
    """One point per (launcher, variant, GPU count, node count), in that order."""
    points = []
    for launcher, variant in sorted({(r.launcher, r.variant) for r in runs}):
        rows = [r for r in runs if (r.launcher, r.variant) == (launcher, variant)]
        ok = [r for r in rows if r.status == Status.OK.value and r.throughput is not None]
        base = [r for r in ok if r.gpus == 1]
        for gpus, nodes in sorted({(r.gpus, r.nodes) for r in rows}):
            at_n = [r for r in rows if (r.gpus, r.nodes) == (gpus, nodes)]
            points.append(_point(at_n, base, probes))
    return points

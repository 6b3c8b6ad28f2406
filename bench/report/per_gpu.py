"""The per-gpu check's fleet table: every GPU's img/s against its node's median and the published
figure for its model (bench.reference), slowest first, and a verdict that flags a GPU more than
--slow-gpu-threshold percent below either.

Pure functions of the rows (bench.rows: one per GPU, `gpu_index` set). `verdicts` is the table;
report.md shows it and write_report stores it as per_gpu.parquet and per_gpu.csv (one
`GpuVerdict` per row, its columns from the dataclass like every other table).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import reference
from bench.config import BenchConfig
from bench.report.tables import Column, column_table, escape, num, pct
from bench.schema import RunRow, Status
from bench.spec import knobs

OK = "ok"
THRESHOLD = dict(knobs(BenchConfig))["slow_gpu_threshold"]  # --slow-gpu-threshold


@dataclass(frozen=True)
class GpuVerdict:
    """One GPU's one-GPU run in the per-gpu check, and what it says about the GPU."""

    node: str
    gpu_index: int
    model: str  # the device name its run saw ("" when it reported none)
    throughput: float | None  # img/s; None when the run failed
    node_median: float | None  # median img/s of its node's measured GPUs, same launch
    vs_node_median: float | None  # throughput / node_median - 1
    published: float | None  # bench.reference's figure for its model and precision, 1 GPU
    published_source: str
    vs_published: float | None  # throughput / published - 1
    verdict: str  # "ok", "SLOW vs node median", "SLOW vs published", ..., "FAILED", "OOM"
    # why it may be slow, from its timed window's telemetry (bench.shared.telemetry; GPUs only)
    sm_clock_mhz_mean: float | None
    throttle_reasons: str
    status: str
    error: str
    run_id: str
    repeat: int
    variant: str

    @property
    def flagged(self) -> bool:
        return self.verdict != OK


def threshold_of(config: Mapping[str, Any]) -> float:
    """A stored sweep's --slow-gpu-threshold (the knob's default for one saved before it)."""
    return float(config.get("slow_gpu_threshold", THRESHOLD.default))


def relative(value: float | None, to: float | None) -> float | None:
    """value / to - 1 (-0.25: a quarter below), None where either is missing."""
    if value is None or not to:
        return None
    return value / to - 1


def judge(
    throughput: float | None,
    node_median: float | None,
    published: float | None,
    threshold_pct: float,
    status: str = Status.FAILED.value,
) -> str:
    """The verdict: the run's status in capitals (FAILED, OOM, TIMEOUT, ...) without a
    measurement; SLOW against each reference it is more than `threshold_pct` percent below
    (exactly at the threshold is ok); else ok."""
    if throughput is None:
        return status.upper()
    below = [
        name
        for name, to in (("node median", node_median), ("published", published))
        if (gap := relative(throughput, to)) is not None and gap < -threshold_pct / 100
    ]
    return "SLOW vs " + " and ".join(below) if below else OK


def published_figure(row: RunRow) -> reference.Published | None:
    """The published 1-GPU figure for the row's GPU model and precision: only for ResNet-50 at
    224 px, the workload the figures measured."""
    if (row.model, row.image_size) != ("resnet50", reference.RESNET50_IMAGE_SIZE):
        return None
    gpu = reference.identify_gpu(row.device_name)
    if gpu is None:
        return None
    return reference.nearest_published(reference.published_for(gpu, row.precision), 1)


def _node(row: RunRow) -> str:
    return row.hosts.rsplit(":", 1)[0]  # a per-GPU row's placement is its node, 1 slot


def verdicts(runs: Sequence[RunRow], threshold_pct: float) -> list[GpuVerdict]:
    """Every per-GPU row's verdict, slowest first (failed GPUs first, then by img/s; ties by
    node and GPU index). A node's median is over its measured GPUs of the same launch (repeat
    and variant); a node with one GPU is its own median."""
    mine = [r for r in runs if r.gpu_index is not None]
    measured: dict[tuple[int, str, str], list[float]] = {}
    for r in mine:
        if r.status == Status.OK.value and r.throughput is not None:
            measured.setdefault((r.repeat, r.variant, _node(r)), []).append(r.throughput)
    out = []
    for r in mine:
        ok = r.status == Status.OK.value and r.throughput is not None
        throughput = r.throughput if ok else None
        rates = measured.get((r.repeat, r.variant, _node(r)))
        median = statistics.median(rates) if rates else None
        figure = published_figure(r) if ok else None
        published = figure.images_per_s_per_gpu if figure else None
        out.append(
            GpuVerdict(
                node=_node(r),
                gpu_index=r.gpu_index,
                model=r.device_name,
                throughput=throughput,
                node_median=median,
                vs_node_median=relative(throughput, median),
                published=published,
                published_source=figure.source if figure else "",
                vs_published=relative(throughput, published),
                verdict=judge(throughput, median, published, threshold_pct, r.status),
                sm_clock_mhz_mean=r.sm_clock_mhz_mean,
                throttle_reasons=r.throttle_reasons,
                status=r.status,
                error=r.error,
                run_id=r.run_id,
                repeat=r.repeat,
                variant=r.variant,
            )
        )
    return sorted(
        out,
        key=lambda v: (v.throughput is not None, v.throughput or 0.0, v.node, v.gpu_index),
    )


FLEET_COLUMNS: list[Column] = [
    ("node", lambda v: escape(v.node)),
    ("GPU", lambda v: v.gpu_index),
    ("model", lambda v: escape(v.model or "?")),
    ("img/s", lambda v: num(v.throughput)),
    ("vs node median", lambda v: pct(v.vs_node_median)),
    ("vs published", lambda v: pct(v.vs_published)),
    ("verdict", lambda v: f"**{v.verdict}**" if v.flagged else v.verdict),
]
FLEET_HEADER = [h for h, _ in FLEET_COLUMNS]


def fleet_table(table_rows: Sequence[GpuVerdict]) -> list[str]:
    """The fleet table in Markdown, in the order given (`verdicts`: slowest first)."""
    return column_table(FLEET_COLUMNS, table_rows)


def per_gpu_section(table_rows: Sequence[GpuVerdict], threshold_pct: float) -> list[str]:
    """report.md's section: which GPUs are flagged, the table, and how it was judged."""
    flagged = [f"{v.node} GPU {v.gpu_index} ({v.verdict})" for v in table_rows if v.flagged]
    summary = (
        f"**{len(flagged)} of {len(table_rows)} GPU runs flagged:** " + "; ".join(flagged) + "."
        if flagged
        else f"All {len(table_rows)} GPU runs within {threshold_pct:g} %."
    )
    return [
        summary,
        "",
        *fleet_table(table_rows),
        "",
        "Each GPU ran the same one-GPU workload alone, every GPU of every node at once, nothing "
        "exchanged between them. vs node median = img/s / the median img/s of its node's "
        "measured GPUs in the same launch - 1; vs published = img/s / the published 1-GPU figure "
        "for its model and precision (bench/reference.py; ResNet-50 at 224 px only) - 1. A GPU "
        f"more than {threshold_pct:g} % below either (--slow-gpu-threshold) is SLOW; one whose "
        "run did not finish shows its status (FAILED, OOM, TIMEOUT; the error is in the "
        "Failures section and per_gpu.csv).",
    ]

"""Measured figures against the outside world: the FLOP bound and published results.

One place for every per-point comparison with bench.reference (datasheet peaks, published
img/s, and any further reference column such as model FLOP utilisation): add a column to
`comparison_rows` and its header to `COMPARISON_HEADER`, and the sanity checks can use it too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench import reference, stats
from bench.report.summary import ScalingPoint
from bench.report.tables import num, pct, table
from bench.schema import RunRow, Status


@dataclass(frozen=True)
class Bound:
    """The FLOP bound for one point: no GPU trains faster than peak FLOP/s / FLOPs per image."""

    point: ScalingPoint
    images_per_s_per_gpu: float  # NaN where the peak or the model's FLOPs are unknown
    precision: str

    @property
    def utilisation(self) -> float:
        return self.point.throughput_per_gpu / self.images_per_s_per_gpu


def flop_bounds(runs: Sequence[RunRow], points: Sequence[ScalingPoint]) -> list[Bound]:
    """The FLOP bound of every GPU point with a measured throughput (none on CPU)."""
    ok = [r for r in runs if r.status == Status.OK.value]
    gpu = reference.identify_gpu(ok[0].device_name) if ok and ok[0].device == "cuda" else None
    if gpu is None:
        return []
    bounds = []
    for p in points:
        sample = next((r for r in ok if (r.launcher, r.variant) == (p.launcher, p.variant)), None)
        if sample is None or math.isnan(p.throughput_per_gpu):
            continue
        peak = reference.peak_flops(gpu, sample.precision)
        flops = reference.flops_per_image(sample.model, sample.image_size)
        bound = stats.flop_bound_images_per_s(peak, flops) if peak and flops else math.nan
        bounds.append(Bound(p, bound, sample.precision))
    return bounds


COMPARISON_HEADER = [
    "launcher",
    "variant",
    "GPUs",
    "img/s per GPU (mean of launches)",
    "FLOP bound img/s",
    "of FLOP bound",
    "published per GPU (nearest GPU count)",
    "measured / published",
    "of MLPerf per GPU",
]


def comparison_rows(gpu: reference.GpuPeak, bounds: Sequence[Bound]) -> list[list[str]]:
    rows = []
    for b in bounds:
        p = b.point
        published = reference.published_for(gpu, b.precision)
        peer = reference.nearest_published(published, p.gpus)
        ceiling = next((x for x in published if x.ceiling), None)
        verdict = " **ABOVE THE FLOP BOUND: measurement bug**" if b.utilisation > 1 else ""
        peer_text = (
            f"{num(peer.images_per_s_per_gpu)} ({peer.source}, {peer.gpus} GPU)" if peer else "none"
        )
        rows.append(
            [
                p.launcher,
                p.variant,
                str(p.gpus),
                num(p.throughput_per_gpu),
                num(b.images_per_s_per_gpu, 0),
                pct(b.utilisation) + verdict,
                peer_text,
                pct(p.throughput_per_gpu / peer.images_per_s_per_gpu) if peer else "n/a",
                pct(p.throughput_per_gpu / ceiling.images_per_s_per_gpu) if ceiling else "n/a",
            ]
        )
    return rows


def reference_section(runs: Sequence[RunRow], points: Sequence[ScalingPoint]) -> list[str]:
    ok = [r for r in runs if r.status == Status.OK.value]
    if not ok or ok[0].device != "cuda":
        return ["No GPU in this sweep: published GPU figures and the FLOP bound do not apply."]
    name = ok[0].device_name
    gpu = reference.identify_gpu(name)
    if gpu is None:
        return [f"{name}: no published figures or datasheet peak on file."]
    lines = [f"Detected **{name}** (datasheet: {gpu.name}).", ""]
    lines += table(COMPARISON_HEADER, comparison_rows(gpu, flop_bounds(runs, points)))
    lines += ["", "Published figures for this GPU:", ""]
    lines += table(
        ["source", "precision", "layout", "batch/GPU", "GPUs", "img/s per GPU", "MFU", "note"],
        [
            [
                f"[{p.source}]({p.url})" if p.url else p.source,
                p.precision,
                p.layout,
                str(p.batch_per_gpu or "?"),
                str(p.gpus),
                num(p.images_per_s_per_gpu),
                pct(reference.mfu(p.images_per_s_per_gpu, gpu, p.precision)),
                p.note,
            ]
            for p in reference.published_on(gpu)
        ],
    )
    lines += [
        "",
        "MFU: img/s x 24.6 GFLOP per ResNet-50 training image / the datasheet's dense "
        'peak FLOP/s at that precision (the measured rows\' "of FLOP bound" is the same '
        "ratio).",
    ]
    return lines

"""Measured figures against the outside world: the FLOP bound and published results.

One place for every per-point comparison with bench.reference (datasheet peaks, published
img/s, and any further reference column such as model FLOP utilisation): add a (header, cell)
pair to `COMPARISON_COLUMNS`, and a field to `Bound` that the sanity checks can use too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench import reference, stats
from bench.report.summary import ScalingPoint
from bench.report.tables import Column, column_table, num, pct
from bench.schema import RunRow, Status


@dataclass(frozen=True)
class Bound:
    """The FLOP bound for one point: no GPU trains faster than peak FLOP/s / FLOPs per image;
    and the published figures for its GPU and precision that the point is set beside."""

    point: ScalingPoint
    images_per_s_per_gpu: float  # NaN where the peak or the model's FLOPs are unknown
    peer: reference.Published | None  # the harness figure at the nearest GPU count
    ceiling: reference.Published | None  # MLPerf's

    @property
    def utilisation(self) -> float:
        return self.point.throughput_per_gpu / self.images_per_s_per_gpu

    def share_of(self, published: reference.Published | None) -> str:
        """Measured img/s per GPU as a share of a published figure (n/a without one)."""
        figure = published.images_per_s_per_gpu if published else math.nan
        return pct(self.point.throughput_per_gpu / figure)


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
        published = reference.published_for(gpu, sample.precision)
        peer = reference.nearest_published(published, p.gpus)
        ceiling = next((x for x in published if x.ceiling), None)
        bounds.append(Bound(p, bound, peer, ceiling))
    return bounds


ABOVE = " **ABOVE THE FLOP BOUND: measurement bug**"
COMPARISON_COLUMNS: list[Column] = [
    ("launcher", lambda b: b.point.launcher),
    ("variant", lambda b: b.point.variant),
    ("GPUs", lambda b: b.point.gpus),
    ("img/s per GPU (mean of launches)", lambda b: num(b.point.throughput_per_gpu)),
    ("FLOP bound img/s", lambda b: num(b.images_per_s_per_gpu, 0)),
    ("of FLOP bound", lambda b: pct(b.utilisation) + (ABOVE if b.utilisation > 1 else "")),
    ("published per GPU (nearest GPU count)", lambda b: _published_text(b.peer)),
    ("measured / published", lambda b: b.share_of(b.peer)),
    ("of MLPerf per GPU", lambda b: b.share_of(b.ceiling)),
]


def _published_text(peer: reference.Published | None) -> str:
    return f"{num(peer.images_per_s_per_gpu)} ({peer.source}, {peer.gpus} GPU)" if peer else "none"


def reference_section(runs: Sequence[RunRow], points: Sequence[ScalingPoint]) -> list[str]:
    ok = [r for r in runs if r.status == Status.OK.value]
    if not ok or ok[0].device != "cuda":
        return ["No GPU in this sweep: published GPU figures and the FLOP bound do not apply."]
    name = ok[0].device_name
    gpu = reference.identify_gpu(name)
    if gpu is None:
        return [f"{name}: no published figures or datasheet peak on file."]
    lines = [f"Detected **{name}** (datasheet: {gpu.name}).", ""]
    lines += column_table(COMPARISON_COLUMNS, flop_bounds(runs, points))
    lines += ["", "Published figures for this GPU:", ""]
    lines += column_table(
        [
            ("source", lambda p: f"[{p.source}]({p.url})" if p.url else p.source),
            ("precision", lambda p: p.precision),
            ("layout", lambda p: p.layout),
            ("batch/GPU", lambda p: p.batch_per_gpu or "?"),
            ("GPUs", lambda p: p.gpus),
            ("img/s per GPU", lambda p: num(p.images_per_s_per_gpu)),
            ("MFU", lambda p: pct(reference.mfu(p.images_per_s_per_gpu, gpu, p.precision))),
            ("note", lambda p: p.note),
        ],
        reference.published_on(gpu),
    )
    lines += [
        "",
        "MFU: img/s x 24.6 GFLOP per ResNet-50 training image / the datasheet's dense "
        'peak FLOP/s at that precision (the measured rows\' "of FLOP bound" is the same '
        "ratio).",
    ]
    return lines

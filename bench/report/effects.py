"""What a training-side knob does to throughput, scaling, memory and communication.

For gradient accumulation and activation checkpointing (the knobs that trade compute, memory and
communication against each other), each configuration is set beside the same configuration with
the knob at its default: img/s, efficiency, the effective global batch, the gradient MB each GPU
reduces per image and the peak memory, all from the rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bench import stats
from bench.report.summary import ScalingPoint, rows_of
from bench.report.tables import num, pct, table
from bench.schema import RunRow
from bench.spec import Variant, knobs

EFFECT_KNOBS = {  # Variant field -> how the report names it
    "grad_accum": "gradient accumulation (micro-batches per step)",
    "activation_checkpointing": "activation checkpointing",
}


def variant_of(row: RunRow) -> Variant:
    """The Variant a row ran, from its knob columns."""
    return Variant(**{f.name: getattr(row, f.name) for f in dataclasses.fields(Variant)})


def _mean(rows: Sequence[RunRow], column: str) -> float:
    return stats.mean([v for r in rows if (v := getattr(r, column)) is not None])


def effect_table(knob: str, points: Sequence[ScalingPoint], runs: Sequence[RunRow]) -> list[str]:
    """One row per configuration, grouped so each knob value sits beside the others."""
    default = next(f.default for f in dataclasses.fields(Variant) if f.name == knob)
    entries: list[tuple[Any, ...]] = []
    for p in points:
        good = rows_of(p, runs)
        if not good:
            continue
        variant = variant_of(good[0])
        base = dataclasses.replace(variant, **{knob: default}).label
        entries.append((p.launcher, p.nodes, p.gpus, base, getattr(variant, knob), p, good))
    if len({e[4] for e in entries}) < 2:
        return []
    spec = dict(knobs(Variant))[knob]
    words = {v: w for w, v in spec.values.items()} if spec.values else {}
    rows = []
    for launcher, _, gpus, base, value, p, good in sorted(entries, key=lambda e: e[:5]):
        rows.append(
            [
                launcher,
                base,
                str(gpus),
                words.get(value, str(value)),
                str(p.global_batch),
                num(p.throughput),
                pct(p.efficiency),
                num(_mean(good, "allreduce_mb_per_image"), 3),
                num(_mean(good, "peak_memory_gb"), 2),
            ]
        )
    unit = "ranks" if any(p.cpu for p in points) else "GPUs"
    header = [
        "launcher",
        "configuration",
        unit,
        spec.flag,
        "global batch (per step)",
        "img/s (mean of launches)",
        "efficiency vs ideal",
        "allreduce MB per image (mean)",
        "peak memory GB (mean)",
    ]
    return table(header, rows)


def effects_section(points: Sequence[ScalingPoint], runs: Sequence[RunRow]) -> list[str]:
    lines: list[str] = []
    for knob, title in EFFECT_KNOBS.items():
        rows = effect_table(knob, points, runs)
        if rows:
            lines += [f"### {title.capitalize()}", "", *rows, ""]
    if lines:
        lines.insert(
            0,
            "Each configuration beside itself with the knob at its default. Peak memory is the "
            "largest rank's (GPU: allocated by torch; CPU: the process's peak RSS). Allreduce MB "
            "per image = gradient bytes (halved by --fp16-allreduce) / images trained per "
            "allreduce.\n",
        )
    return lines

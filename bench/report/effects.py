"""What a training-side knob does to throughput, scaling, memory and communication.

For gradient accumulation and activation checkpointing (the knobs that trade compute, memory and
communication against each other) and rank pinning (--cpu-affinity), each configuration is set
beside the same configuration with the knob at its default: img/s, efficiency, the effective
global batch, the gradient MB each GPU reduces per image and the peak memory, all from the rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from bench import stats
from bench.report.summary import ScalingPoint
from bench.report.tables import Column, column_table, num, pct
from bench.schema import RunRow
from bench.spec import Variant, knobs

EFFECT_KNOBS = {  # Variant field -> how the report names it
    "grad_accum": "gradient accumulation (micro-batches per step)",
    "activation_checkpointing": "activation checkpointing",
    "cpu_affinity": "rank pinning (--cpu-affinity)",
}


def _mean(rows: Sequence[RunRow], column: str) -> float:
    return stats.mean([v for r in rows if (v := getattr(r, column)) is not None])


class Effect(NamedTuple):
    """One configuration in an effect table, sorted on the fields before `point`."""

    launcher: str
    nodes: int
    gpus: int
    base: str  # the configuration's label with the knob at its default
    value: Any  # the knob's value
    point: ScalingPoint


def effect_table(knob: str, points: Sequence[ScalingPoint]) -> list[str]:
    """One row per configuration, grouped so each knob value sits beside the others."""
    defaults = {f.name: f.default for f in dataclasses.fields(Variant)}
    entries: list[Effect] = []
    for p in points:
        if p.rows:  # the Variant the rows ran, from their knob columns
            variant = Variant(**{name: getattr(p.rows[0], name) for name in defaults})
            base = dataclasses.replace(variant, **{knob: defaults[knob]}).label
            entries.append(Effect(p.launcher, p.nodes, p.gpus, base, getattr(variant, knob), p))
    if len({e.value for e in entries}) < 2:
        return []
    spec = dict(knobs(Variant))[knob]
    words = {v: w for w, v in spec.values.items()} if spec.values else {}
    columns: list[Column] = [
        ("launcher", lambda e: e.launcher),
        ("configuration", lambda e: e.base),
        ("ranks" if any(p.cpu for p in points) else "GPUs", lambda e: e.gpus),
        (spec.flag, lambda e: words.get(e.value, str(e.value))),
        ("global batch (per step)", lambda e: e.point.global_batch),
        ("img/s (mean of launches)", lambda e: num(e.point.throughput)),
        ("efficiency vs ideal", lambda e: pct(e.point.efficiency)),
        (
            "allreduce MB per image (mean)",
            lambda e: num(_mean(e.point.rows, "allreduce_mb_per_image"), 3),
        ),
        ("peak memory GB (mean)", lambda e: num(_mean(e.point.rows, "peak_memory_gb"), 2)),
    ]
    return column_table(columns, sorted(entries, key=lambda e: e[:5]))


def effects_section(points: Sequence[ScalingPoint]) -> list[str]:
    lines: list[str] = []
    for knob, title in EFFECT_KNOBS.items():
        rows = effect_table(knob, points)
        if rows:
            lines += ["", f"### {title.capitalize()}", "", *rows]
    if not lines:
        return []
    return [
        "Each configuration beside itself with the knob at its default. Peak memory is the "
        "largest rank's (GPU: allocated by torch; CPU: the process's peak RSS). Allreduce MB "
        "per image = gradient bytes (halved by --fp16-allreduce) / images trained per "
        "allreduce.",
        *lines,
    ]

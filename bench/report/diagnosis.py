"""Why scaling is not linear, and which figures should not be trusted, from the measurements.

Every sentence here is derived from a column of the rows or a probe (threads per rank, cores
used, data wait share, rank imbalance, clock events, the allreduce probe, the spread of the
launches); where the measurements do not explain a gap, the report says so instead of guessing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench import stats
from bench.report.comparison import flop_bounds
from bench.report.epochs import claim_fit, fit_text, measured_fits
from bench.report.summary import ScalingPoint, counted
from bench.report.tables import num, pct
from bench.schema import RunRow
from bench.shared.telemetry import SLOWDOWN_REASONS

# Thresholds, each stated in the report beside the flags it raises.
CV_THRESHOLD = 0.05  # launches of one configuration whose img/s varies more are "noisy"
DATA_WAIT_THRESHOLD = 0.05  # share of the timed window spent waiting for input
IMBALANCE_THRESHOLD = 0.10  # slowest / fastest rank window - 1
UNEXPLAINED_MARGIN = 0.10  # efficiency this far below the allreduce ceiling is unexplained
STEP_MISMATCH = 0.25  # img/s vs global batch / median step disagreeing by more than this

THRESHOLDS_TEXT = (
    f"Thresholds: CV of img/s over launches above {pct(CV_THRESHOLD)}; efficiency above 100 % "
    "only when the whole 95 % interval is; img/s above the FLOP bound; a negative term in an "
    f"epoch fit; img/s and the median step disagreeing by more than {pct(STEP_MISMATCH)}."
)


def loader_sentence(p: ScalingPoint) -> str:
    """Real data: what the loader delivers alone against what the model consumed, per GPU."""
    rates = [r.loader_throughput_per_gpu for r in p.rows if r.loader_throughput_per_gpu]
    if not rates or math.isnan(p.throughput_per_gpu):
        return ""
    delivers = stats.mean(rates)
    ratio = f"{delivers / p.throughput_per_gpu:.1f}x that"
    if delivers < p.throughput_per_gpu * 1.1:
        verdict = "the loader is the bottleneck"
    elif p.data_wait_fraction > DATA_WAIT_THRESHOLD:
        # nvjpeg on the H100 (docs/results/2026-11-26-h100): 8,898 img/s alone, 4,443 while
        # training, 41 % of the window waiting for data: alone is not beside the model.
        verdict = (
            f"{ratio} alone, yet it fell behind while training: the loader and the model "
            "share the GPU or the host's cores, so its rate alone overstates what it delivers"
        )
    else:
        verdict = f"{ratio}: input does not limit it"
    return (
        f"the {p.rows[0].loader} loader alone delivers {num(delivers, 0)} img/s per GPU (slowest "
        f"rank), the model consumed {num(p.throughput_per_gpu, 0)}: {verdict}"
    )


def loader_section(points: Sequence[ScalingPoint]) -> list[str]:
    """Real data: one line per configuration, the loader's own rate beside the model's."""
    return [f"- {label(p)}: {sentence}." for p in points if (sentence := loader_sentence(p))]


def label(p: ScalingPoint) -> str:
    text = f"{p.launcher} {p.variant} at {counted(p.gpus, 'rank' if p.cpu else 'GPU')}"
    return text + (f" on {p.nodes} nodes" if p.nodes > 1 else "")


def _resources(p: ScalingPoint, base: ScalingPoint | None) -> list[str]:
    """CPU ranks that only split the same cores cannot speed up: say so with the numbers."""
    if not p.cpu or base is None or math.isnan(p.ideal_speedup) or p.ideal_speedup > 1.0:
        return []
    return [
        f"{label(p)}: {p.placement} use the same cores as {base.placement}: the ideal speed-up "
        f"is {p.ideal_speedup:.2f}x (cores used at {p.gpus} ranks / at 1), so no speed-up is "
        f"expected; measured {p.speedup:.2f}x."
    ]


def _communication(p: ScalingPoint, imbalance: float) -> list[str]:
    if p.efficiency > 1.0 + UNEXPLAINED_MARGIN:
        return [
            f"{label(p)}: efficiency {pct(p.efficiency)} is above the ideal, which no allreduce "
            f"can explain: per {'core' if p.cpu else 'GPU'}, the 1-rank launches ran slower "
            "than these (compare their img/s, CV and median step in the table)."
        ]
    if math.isnan(p.comm_ceiling):
        return [
            f"{label(p)}: efficiency {pct(p.efficiency)}; no allreduce probe was measured for "
            "this rank count, so communication cannot be assessed (drop --no-probe)."
        ]
    how = (
        "adding to each step, as gloo runs it on the same cores"
        if p.cpu
        else "hidden behind the backward pass at best"
    )
    probe = (
        f"the probe's allreduce of this model's gradients takes {num(p.allreduce_s * 1e3)} ms "
        f"against ~{num(p.compute_s * 1e3)} ms of compute per step, {how}: at most "
        f"{pct(p.comm_ceiling)} of ideal"
    )
    if p.efficiency > p.comm_ceiling + UNEXPLAINED_MARGIN:
        return [
            f"{label(p)}: efficiency {pct(p.efficiency)} is above the allreduce ceiling: {probe}. "
            "So the allreduce overlapped part of the compute, or the probe overstates "
            "its cost at this size."
        ]
    if p.efficiency >= p.comm_ceiling - UNEXPLAINED_MARGIN:
        return [
            f"{label(p)}: efficiency {pct(p.efficiency)} is explained by communication: {probe}."
        ]
    explained = (
        f"data wait {pct(p.data_wait_fraction)}, rank imbalance {pct(imbalance)}"
        if not math.isnan(imbalance)
        else f"data wait {pct(p.data_wait_fraction)}"
    )
    return [
        f"{label(p)}: efficiency {pct(p.efficiency)} is {pct(p.comm_ceiling - p.efficiency)} "
        f"below what communication allows ({probe}); the other measurements ({explained}) do "
        "not account for the rest either: it is unexplained by what this sweep records."
    ]


def _measured_causes(p: ScalingPoint) -> tuple[list[str], float]:
    notes = []
    imbalance = stats.mean([r.rank_imbalance for r in p.rows if r.rank_imbalance is not None])
    loader = loader_sentence(p)
    if p.data_wait_fraction > DATA_WAIT_THRESHOLD:
        notes.append(
            f"{label(p)}: input-bound: {pct(p.data_wait_fraction)} of the timed window was "
            "spent waiting for batches"
            + (f"; {loader}" if loader else "")
            + " (raise --workers, try --loader nvjpeg or dali, or use faster storage)."
        )
    if imbalance > IMBALANCE_THRESHOLD:
        notes.append(
            f"{label(p)}: stragglers: the slowest rank took {pct(imbalance)} longer than the "
            "fastest, and every step waits for it."
        )
    throttled = sorted(
        {t for r in p.rows for t in r.throttle_reasons.split(",") if t in SLOWDOWN_REASONS}
    )
    if throttled:
        notes.append(f"{label(p)}: GPU clocks were held down ({', '.join(throttled)}).")
    return notes, imbalance


def observations(points: Sequence[ScalingPoint]) -> list[str]:
    """Reasons the scaling is not linear, each derived from the rows and the probe."""
    notes = []
    bases = {(p.launcher, p.variant): p for p in points if p.gpus == 1}
    for p in points:
        if p.gpus == 1 or math.isnan(p.efficiency):
            continue
        causes, imbalance = _measured_causes(p)
        notes += _resources(p, bases.get((p.launcher, p.variant)))
        notes += _communication(p, imbalance)
        notes += causes
        if p.efficiency_ci.defined and p.efficiency_ci.low <= 1.0 <= p.efficiency_ci.high:
            notes.append(
                f"{label(p)}: the 95 % interval of the efficiency "
                f"({pct(p.efficiency_ci.low)} to {pct(p.efficiency_ci.high)}) includes 100 %: "
                "these launches cannot tell this point from the ideal."
            )
    return notes


def _point_flags(p: ScalingPoint) -> list[str]:
    flags = []
    if p.runs_ok == 1:
        flags.append(f"{label(p)}: one successful launch: no interval (use --repeats 3 or more).")
    if p.cv > CV_THRESHOLD:
        flags.append(
            f"{label(p)}: noisy: img/s varies by CV {pct(p.cv)} over {p.runs_ok} launches "
            f"(threshold {pct(CV_THRESHOLD)}); use more --repeats or a quieter machine."
        )
    if p.gpus > 1 and p.efficiency_ci.defined and p.efficiency_ci.low > 1.0:
        flags.append(
            f"{label(p)}: efficiency {pct(p.efficiency)} is above 100 % beyond noise (95 % "
            f"interval from {pct(p.efficiency_ci.low)}): the 1-rank baseline ran slower than it "
            "should (a busy machine, a cold cache) or the work per rank differs."
        )
    implied = p.global_batch / p.step_time_s if p.step_time_s > 0 else math.nan
    if abs(implied / p.throughput - 1.0) > STEP_MISMATCH:
        flags.append(
            f"{label(p)}: img/s {num(p.throughput)} and the median step "
            f"{num(p.step_time_s * 1e3)} ms ({num(implied)} img/s at {p.global_batch} images "
            f"per step) disagree by more than {pct(STEP_MISMATCH)}: step times within a launch "
            "are skewed (see step_time_p90_s in runs.csv) or the launches differ."
        )
    return flags


def sanity_flags(
    points: Sequence[ScalingPoint],
    runs: Sequence[RunRow],
    dataset_size: int,
    claim: Sequence[Sequence[float]] = (),
) -> list[str]:
    """Figures that contradict physics or are too noisy to read, each with its threshold."""
    flags = [f for p in points for f in _point_flags(p)]
    for b in flop_bounds(runs, points):
        if b.utilisation > 1.0:
            flags.append(
                f"{label(b.point)}: {num(b.point.throughput_per_gpu)} img/s per GPU is above the "
                f"FLOP bound of {num(b.images_per_s_per_gpu, 0)}: a measurement bug."
            )
    for (launcher, variant), fit in measured_fits(points, dataset_size).items():
        if fit.negative_terms:
            flags.append(f"{launcher} {variant}: epoch fit {fit_text(fit)}.")
    fit = claim_fit(claim) if claim else None
    if fit is not None and fit.negative_terms:
        flags.append(f"claimed epoch times: {fit_text(fit)}.")
    return flags

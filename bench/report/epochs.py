"""Epoch-time projection: seconds per epoch at the measured img/s, the T(N) = a + b/N fit, and
the check of a claimed epoch time against it."""

from __future__ import annotations

from collections.abc import Sequence

from bench import stats
from bench.report.summary import ScalingPoint, series
from bench.report.tables import num, signed_terms, table
from bench.spec import SYNTHETIC


def fit_text(fit: stats.EpochModel) -> str:
    """The fit, written sanely, with any negative term flagged where it is printed."""
    text = f"T(N) = {signed_terms(fit.fixed_s, fit.scalable_s)} s"
    if fit.negative_terms:
        text += f" **(negative {', '.join(fit.negative_terms)}: not a physical model)**"
    return text


def measured_fits(
    points: Sequence[ScalingPoint], dataset_size: int
) -> dict[tuple[str, str], stats.EpochModel]:
    """The epoch-time fit of every series measured at two or more GPU counts."""
    return {
        key: stats.fit_epoch_model(
            [p.gpus for p in measured],
            [dataset_size / p.throughput for p in measured],
        )
        for key, measured in series(points, "throughput").items()
        if len({p.gpus for p in measured}) >= 2
    }


def claim_fit(claim: Sequence[Sequence[float]]) -> stats.EpochModel | None:
    if len({g for g, _ in claim}) < 2:
        return None
    return stats.fit_epoch_model([int(g) for g, _ in claim], [s for _, s in claim])


def _claim_lines(dataset_size: int, claim: Sequence[Sequence[float]]) -> list[str]:
    rows = []
    for gpus, seconds in claim:
        implied = stats.throughput(dataset_size, seconds)
        rows.append([str(int(gpus)), num(seconds, 0), num(implied), num(implied / gpus)])
    lines = ["", "### Claim check", ""]
    lines += table(["GPUs", "claimed s/epoch", "implied img/s", "implied img/s per GPU"], rows)
    fit = claim_fit(claim)
    if fit is not None:
        lines += [
            "",
            f"The claim fits {fit_text(fit)}: {fit.fixed_s:,.1f} s of each epoch does not shrink "
            "with more GPUs. Compare the implied per-GPU rate with the FLOP bound and published "
            "figures above: a rate above them means the epoch was not the stated dataset size.",
        ]
    return lines


def epoch_section(
    points: Sequence[ScalingPoint],
    dataset_size: int,
    claim: Sequence[Sequence[float]],
    data: str = SYNTHETIC,
) -> list[str]:
    source = (
        "synthetic data (the model alone: reading and decoding images is not in it)"
        if data == SYNTHETIC
        else f"real images from {data}, read by the loader each variant names"
    )
    lines = [
        f"Seconds per epoch of {dataset_size:,} images at the measured img/s (mean of "
        f"launches), measured on {source}.",
        "",
    ]
    fits = measured_fits(points, dataset_size)
    rows = []
    for key, measured in series(points, "throughput").items():
        for p in measured:
            seconds = dataset_size / p.throughput
            rows.append([*key, str(p.gpus), num(seconds, 0), ""])
        if key in fits:
            rows.append([*key, "fit", "", fit_text(fits[key])])
    lines += table(["launcher", "variant", "GPUs", "s/epoch", "model"], rows)
    if claim:
        lines += _claim_lines(dataset_size, claim)
    return lines

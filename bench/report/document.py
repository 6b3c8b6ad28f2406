"""report.md: the sections in order, and `write_report`, which also draws the plots."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import stats
from bench.report.comparison import reference_section
from bench.report.diagnosis import THRESHOLDS_TEXT, loader_section, observations, sanity_flags
from bench.report.effects import effects_section
from bench.report.epochs import epoch_section
from bench.report.per_gpu import GpuVerdict, per_gpu_section, threshold_of, verdicts
from bench.report.plots import plot_efficiency, plot_throughput
from bench.report.summary import ScalingPoint, summarise
from bench.report.tables import (
    Column,
    column_table,
    escape,
    failures_section,
    launcher_comparison,
    num,
    pct,
    probe_table,
    scaling_table,
    system_section,
    telemetry_section,
)
from bench.results import ResultStore, atomic_write_bytes, write_views
from bench.schema import ProbeRow, RunRow
from bench.spec import SYNTHETIC, container_label

CPU_BANNER = (
    '> **CPU SMOKE TEST: NOT GPU RESULTS.** No CUDA GPU was used: every "GPU" below is a CPU\n'
    "> process (gloo backend) training on tiny images. These figures only show that the harness,\n"
    "> launchers and reporting work. Never compare them with GPU numbers or published figures."
)


def definitions(points: Sequence[ScalingPoint]) -> str:
    """What the table's figures are, for the kind of sweep this is."""
    text = (
        "img/s = images in the timed window / the slowest rank's window, per launch; each figure "
        "is the mean of a configuration's successful launches, with a 95 % interval by the "
        f"{stats.MEAN_METHOD} (none for a single launch). CV = standard deviation / mean of the "
        "launches' img/s. speed-up = img/s(N) / img/s(1); efficiency = speed-up / ideal "
        f"speed-up, its interval by the {stats.RATIO_METHOD}, carrying the spread of both. "
    )
    if any(p.cpu for p in points):
        return text + (
            "**On CPU the ideal is what the ranks share:** ideal speed-up = cores used at N "
            "(ranks x threads per rank) / cores used at 1, so ranks that only split the same "
            "cores have an ideal of 1.00x. The allreduce ceiling is t_c / (t_c + t_ar): gloo's "
            "allreduce (t_ar at the probe's bandwidth) runs on the same cores as the compute "
            "(t_c, the 1-rank median step scaled by batch and threads per rank), so it cannot "
            "hide behind it."
        )
    return text + (
        "The ideal speed-up is N. The allreduce ceiling is t_c / max(t_c, t_ar): the best "
        "efficiency the probe's allreduce bandwidth allows for this model's gradients if "
        "communication overlaps the backward pass perfectly (t_c = the 1-GPU median step "
        "scaled by the per-GPU batch)."
    )


def knob_values(meta: dict[str, Any]) -> dict[str, Any]:
    """Every knob of a stored sweep by name (sweep.jsonl nests the workload and the swept axes)."""
    stored = meta.get("config", {})
    return {**stored, **stored.get("axes", {}), **stored.get("workload", {})}


def window_text(config: dict[str, Any]) -> str:
    """How each run's warm-up and timed window were chosen."""
    warmup, steps, seconds = (
        config.get(k) for k in ("warmup_steps", "timed_steps", "timed_seconds")
    )
    if seconds:
        return (
            f"warm-up: at least {warmup} steps, then until the median step time of consecutive "
            f"~1 s windows agreed within 2 % (at most {num(seconds, 0)} s more), excluded; timed "
            f"window: {num(seconds, 0)} s (at least {steps} steps; each row records the steps "
            "run)"
        )
    return f"{warmup} warm-up steps (excluded) + {steps} timed steps per run"


def _intro(meta: dict[str, Any], cpu: bool) -> list[str]:
    config, system = knob_values(meta), meta.get("system", {})
    scaling = (
        f"strong scaling: global batch fixed at {config.get('global_batch')}"
        if config.get("global_batch")
        else f"weak scaling: per-GPU batch fixed at {config.get('batch_size')}, "
        "global batch = per-GPU batch x GPUs x accumulation"
    )
    lines = [f"# {config.get('model', 'model')} training scaling on {system.get('host', '?')}", ""]
    if cpu:
        lines += [CPU_BANNER, ""]
    lines += [
        f"Sweep `{meta.get('sweep_id')}`: {meta.get('state')}, started {meta.get('started_at')}, "
        f"{num(meta.get('elapsed_s', math.nan), 0)} s. Device: "
        f"{'CPU processes (gloo)' if cpu else system.get('gpu_name')}. {config.get('model')} at "
        f"{config.get('image_size')}x{config.get('image_size')}, {scaling}; data: "
        f"{config.get('data')}; {window_text(config)}; {config.get('repeats')} launches per "
        "configuration. Every knob is a column of runs.csv.",
        "",
    ]
    chosen = meta.get("defaults_chosen") or []
    if chosen:
        lines += [
            "Defaults chosen for this GPU (bench/gpu_defaults.py; each is a knob you can "
            "set or sweep):",
            "",
            *(f"- {why}" for why in chosen),
            "",
        ]
    return lines


def section(title: str, body: Sequence[str]) -> list[str]:
    """A `## title` section of report.md; none for an empty body."""
    return [f"## {title}", "", *body, ""] if body else []


def bullets(items: Sequence[str], none: str) -> list[str]:
    return [f"- {item}" for item in items] or [none]


def markdown(
    meta: dict[str, Any],
    runs: Sequence[RunRow],
    probes: Sequence[ProbeRow],
    points: Sequence[ScalingPoint],
    fleet: Sequence[GpuVerdict],
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    directory: Path = Path("."),
) -> str:
    """report.md from the rows, their `summarise` points and `verdicts` fleet table."""
    config = knob_values(meta)
    cpu = config.get("device") == "cpu"
    dataset_size, claim = config.get("dataset_size", 0), config.get("claim", ())
    lines = _intro(meta, cpu)
    lines += section("Throughput and scaling", [*scaling_table(points), "", definitions(points)])
    if fleet:
        fleet_lines = per_gpu_section(fleet, threshold_of(config))
        lines += section("Per-GPU throughput check (slowest first)", fleet_lines)
    lines += ["![throughput](throughput.png)", "", "![efficiency](efficiency.png)", ""]
    flags = bullets(sanity_flags(points, runs, dataset_size, claim), "None raised.")
    lines += section("Sanity checks", [THRESHOLDS_TEXT, "", *flags])
    lines += section("Why not linear?", bullets(observations(points), "Nothing stands out."))
    lines += section("Input pipeline (real data)", loader_section(points))
    lines += section("Training-side knobs", effects_section(points))
    lines += section("Launchers side by side", launcher_comparison(points))
    lines += section("Host and containers", container_section(points, meta))
    probe = probe_table(probes) if probes else ["No probe (single rank, or --no-probe)."]
    busbw = "busbw = algbw x 2(n-1)/n (nccl-tests' definition)."
    lines += section("Allreduce probe", [*probe, "", busbw])
    comparison = reference_section(runs, points)
    lines += section("Comparison with published figures and the FLOP bound", comparison)
    data = runs[0].data if runs else SYNTHETIC  # one --data per sweep
    lines += section("Epoch-time projection", epoch_section(points, dataset_size, claim, data))
    lines += section("GPU telemetry (timed window)", telemetry_section(runs))
    lines += section("Failures", failures_section(runs, probes))
    lines += section("System", system_section(meta))
    appendix = profile_section(profiles or {}, directory)
    lines += section("Appendix: where a step's time goes (--profile)", appendix)
    return "\n".join(lines)


def write_report(directory: Path) -> Path:
    store = ResultStore(directory)
    meta = store.read_meta()
    runs, probes = store.runs.rows(), store.probes.rows()
    store.write_views()
    points = summarise(runs, probes)
    plot_throughput(points, store.paths.plots["throughput"])
    plot_efficiency(points, store.paths.plots["efficiency"])
    fleet = verdicts(runs, threshold_of(knob_values(meta)))
    if fleet:
        write_views(store.paths.views("per_gpu"), fleet, GpuVerdict)
    text = markdown(meta, runs, probes, points, fleet, store.profiles(), directory)
    atomic_write_bytes(store.paths.report, text.encode())
    return store.paths.report


# The host-and-containers section (--container host,IMAGE): which image each short name in the
# variant labels stands for (digest and versions, from sweep.jsonl), and every configuration's
# img/s in an image beside the same configuration on the host.


def image_table(images: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return column_table(
        [
            ("label", lambda i: f"@{container_label(i['reference'])}"),
            ("image", lambda i: f"`{i['reference']}`"),
            ("digest (what ran)", lambda i: f"`{i.get('digest')}`"),
            ("python", lambda i: f"{i.get('executable')} {i.get('python')}"),
            (
                "torch",
                lambda i: f"{i.get('torch')} (CUDA {i.get('torch_cuda')}, NCCL {i.get('nccl')})",
            ),
            ("Horovod", lambda i: i.get("horovod") or "none"),
        ],
        [{**facts, "reference": reference} for reference, facts in images.items()],
    )


def side_by_side(points: Sequence[ScalingPoint]) -> list[str]:
    """Each configuration run in an image beside the same one on the host, where both ran."""
    host = {(p.launcher, p.variant, p.gpus, p.nodes): p for p in points if "@" not in p.variant}

    def on_host(p: ScalingPoint) -> ScalingPoint | None:
        return host.get((p.launcher, p.variant.partition("@")[0], p.gpus, p.nodes))

    def ratio(p: ScalingPoint) -> str:
        base = on_host(p).throughput
        return num(p.throughput / base if base else math.nan, 3)

    inside = [p for p in points if "@" in p.variant and on_host(p) is not None]
    if not inside:
        return []
    return column_table(
        [
            ("launcher", lambda p: p.launcher),
            ("variant", lambda p: p.variant.partition("@")[0]),
            ("ranks" if points[0].cpu else "GPUs", lambda p: p.gpus),
            ("nodes", lambda p: p.nodes),
            ("image", lambda p: "@" + p.variant.partition("@")[2]),
            ("host img/s (mean of launches)", lambda p: num(on_host(p).throughput)),
            ("image img/s (mean of launches)", lambda p: num(p.throughput)),
            ("image / host", ratio),
        ],
        inside,
    )


def container_section(points: Sequence[ScalingPoint], meta: Mapping[str, Any]) -> list[str]:
    """The section's lines, or none for a sweep that ran no image."""
    images = meta.get("system", {}).get("containers") or {}
    if not images:
        return []
    lines = [
        "Each `@name` variant ran every rank in that image (docker run: host network and IPC, "
        "the bench mounted read-only); the variant without it ran on the host. The allreduce "
        "probe runs on the host.",
        "",
        *image_table(images),
    ]
    pairs = side_by_side(points)
    return [*lines, "", *pairs] if pairs else lines


# The appendix for --profile: where each trace is and what a step's time went to. Each profiled
# run (the first repeat of every configuration) left a torch.profiler trace and a summary
# (bench.rank.profiling): the ops (CPU) or kernels (GPU) with the most self time, and the share of
# time spent in communication.


def trace_link(summary: Mapping[str, Any], directory: Path) -> str:
    """The trace as a link relative to the report, or host:path where it is elsewhere."""
    trace = Path(summary.get("trace", ""))
    try:
        return f"[{trace.name}]({trace.relative_to(directory.resolve())})"
    except ValueError:
        return f"`{summary.get('host', '?')}:{trace}` (on the node that ran rank 0)"


def communication_text(summary: Mapping[str, Any]) -> str:
    share = summary.get("communication_share")
    if share is None:
        return (
            "no collective op or kernel appears in the trace (one rank; or Horovod on CPU, whose "
            "collectives run in its own background thread outside torch.profiler: use "
            "HOROVOD_TIMELINE for those)"
        )
    return f"{pct(share)} ({summary.get('basis')})"


OP_COLUMNS: list[Column] = [
    ("op / kernel", lambda op: escape(op["name"][:90])),
    ("ms per step (self)", lambda op: num(op["ms_per_step"], 2)),
    ("share", lambda op: pct(op.get("share"))),
    ("calls per step", lambda op: num(op["calls_per_step"], 1)),
    ("communication", lambda op: "yes" if op["communication"] else ""),
]


def profile_section(profiles: Mapping[str, Mapping[str, Any]], directory: Path) -> list[str]:
    """One block per profiled run: trace, communication share, top ops/kernels."""
    if not profiles:
        return []
    lines = [
        "Traces (Chrome/Perfetto JSON: open in https://ui.perfetto.dev or chrome://tracing) of "
        "steps run after each configuration's timed window, so the profiler never slowed a "
        "measured figure. On GPUs, NVTX ranges mark the compile step, warm-up, the timed "
        "window and every step for Nsight Systems.",
    ]
    for run_id, summary in sorted(profiles.items()):
        lines += [
            "",
            f"### {run_id}",
            "",
            f"- trace: {trace_link(summary, directory)}; {summary.get('steps')} steps in "
            f"{num(summary.get('wall_s', float('nan')), 2)} s",
            f"- communication: {communication_text(summary)}",
            "",
            *column_table(OP_COLUMNS, summary.get("top", [])),
        ]
    return lines

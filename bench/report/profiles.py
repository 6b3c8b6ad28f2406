"""The report's appendix for --profile: where each trace is and what a step's time went to.

Each profiled run (the first repeat of every configuration) left a torch.profiler trace and a
summary (bench.rank.profiling): the ops (CPU) or kernels (GPU) with the most self time, and the
share of time spent in communication.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.report.tables import Column, column_table, escape, num, pct


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
        "",
    ]
    for run_id, summary in sorted(profiles.items()):
        lines += [
            f"### {run_id}",
            "",
            f"- trace: {trace_link(summary, directory)}; {summary.get('steps')} steps in "
            f"{num(summary.get('wall_s', float('nan')), 2)} s",
            f"- communication: {communication_text(summary)}",
            "",
        ]
        lines += column_table(OP_COLUMNS, summary.get("top", []))
        lines.append("")
    return lines

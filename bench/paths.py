"""Where things are: the bench's own code (and the PYTHONPATH that lets another process import it
there), and every file of a sweep's directory (SweepPaths).

Imports nothing of the bench, so every module (the per-rank code included) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path

# The checkout (or install prefix) holding the `bench` package on this machine.
REPO_ROOT = Path(__file__).resolve().parent.parent


def bench_pythonpath(root: str | os.PathLike[str], inherited: str | None = None) -> str:
    """PYTHONPATH for a child that imports the bench from `root` (first, so it wins over any
    other copy) and then whatever the child would have had (`inherited`, when there is one)."""
    return os.pathsep.join(p for p in (os.fspath(root), inherited) if p)


class SweepPaths:
    """Every file of one sweep's directory, named here and nowhere else:

    sweep.jsonl             the store, the only source of the rows (bench.results)
    sweep.json              the store of versions before sweep.jsonl, read once and replaced
    runs, probes, per_gpu   .parquet and .csv views of the store (bench.report.write_report)
    controller.lock         the controller running the sweep (bench.sweep_lock)
    logs/<id>.log           each launch's output; an earlier attempt's as logs/<id>.<k>.log
    logs/<id>.nodes/node<i>-<host>.log   a multi-node launch's output on each node
    logs/<id>.trace.json    --profile: rank 0's torch.profiler trace (Chrome/Perfetto JSON)
    logs/<id>.profile.json  --profile: its summary (top ops/kernels, communication share)
    report.md, throughput.png, efficiency.png   bench.report
    """

    PROFILE = ".profile.json"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.store = self.directory / "sweep.jsonl"
        self.earlier_store = self.directory / "sweep.json"
        self.lock = self.directory / "controller.lock"
        self.logs = self.directory / "logs"
        self.report = self.directory / "report.md"
        self.plots = {k: self.directory / f"{k}.png" for k in ("throughput", "efficiency")}

    def views(self, name: str) -> tuple[Path, Path]:
        """The Parquet and CSV views of the table `name` (runs, probes, per_gpu)."""
        return self.directory / f"{name}.parquet", self.directory / f"{name}.csv"

    def log(self, launch_id: str, attempt: int = 0) -> Path:
        """A launch's output (`attempt` k > 0: an earlier attempt's, kept on --resume); its
        multi-node launch's per-node logs are in the same name with .nodes."""
        return self.logs / (f"{launch_id}.{attempt}.log" if attempt else f"{launch_id}.log")

    @staticmethod
    def nodes(log: Path) -> Path:
        """The directory of a multi-node launch's per-node logs, beside its log."""
        return log.with_suffix(".nodes")

    @staticmethod
    def node_log(nodes: Path, index: int, host: str) -> Path:
        return nodes / f"node{index}-{host}.log"

    @staticmethod
    def trace_name(run_id: str) -> str:
        """A --profile trace's file name, under the logs (the rank writes it there)."""
        return f"{run_id}.trace.json"

    def profile(self, run_id: str) -> Path:
        return self.logs / f"{run_id}{self.PROFILE}"

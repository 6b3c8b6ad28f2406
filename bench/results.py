"""Storing results as each run finishes: Parquet (typed), CSV (for people and spreadsheets) and
sweep.json (configuration, system, state and every row).

Parquet files cannot be appended in place, so each new row rewrites the (small) file to a
temporary name and renames it over the old one: a crash or Ctrl-C at any moment leaves either
the previous or the new complete file, never a torn one. The CSV is appended a line at a time
and rebuilt from Parquet whenever the two could disagree (on open and on resume).

Layout of a sweep directory:
    sweep.json            config, system info, state, runs and probes
    runs.parquet/.csv     one row per run (schema.RunRow)
    probes.parquet/.csv   one row per allreduce probe (schema.ProbeRow)
    logs/<id>.log         each launch's full output
    logs/<id>.trace.json  --profile: rank 0's torch.profiler trace (Chrome/Perfetto JSON)
    logs/<id>.profile.json  --profile: its summary (top ops/kernels, communication share)
    report.md, *.png      written by bench.report
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from bench.schema import (
    ProbeRow,
    Row,
    RunRow,
    Status,
    from_frame,
    to_frame,
    to_json_records,
    to_table,
)

SWEEP_JSON = "sweep.json"
PROFILE_SUFFIX = ".profile.json"
# Rows a resumed sweep runs again: cut short, or not launched because the launcher was missing
# (it may have been installed since).
RETRIED_ON_RESUME = frozenset({Status.INTERRUPTED.value, Status.UNAVAILABLE.value})


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_write_parquet(path: Path, rows: list[Row], cls: type[Row]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(to_table(rows, cls), tmp)
    os.replace(tmp, path)


class _Table:
    """One row type stored as <name>.parquet + <name>.csv; a later row replaces an earlier one
    with the same id (a resumed run replaces its "interrupted" row)."""

    def __init__(self, directory: Path, name: str, cls: type[Row], key: str) -> None:
        self.parquet = directory / f"{name}.parquet"
        self.csv = directory / f"{name}.csv"
        self.cls = cls
        self.key = key

    def rows(self) -> list[Any]:
        if not self.parquet.exists():
            return []
        return from_frame(pq.read_table(self.parquet).to_pandas(), self.cls)

    def frame(self) -> pd.DataFrame:
        return to_frame(self.rows(), self.cls)

    def append(self, row: Any) -> None:
        key = getattr(row, self.key)
        existing = self.rows()
        rows = [r for r in existing if getattr(r, self.key) != key]
        replaced = len(rows) != len(existing)
        _atomic_write_parquet(self.parquet, [*rows, row], self.cls)
        if replaced or not self.csv.exists():
            self.rebuild_csv()
        else:
            to_frame([row], self.cls).to_csv(self.csv, mode="a", header=False, index=False)

    def replace_all(self, rows: list[Any]) -> None:
        _atomic_write_parquet(self.parquet, rows, self.cls)
        self.rebuild_csv()

    def rebuild_csv(self) -> None:
        _atomic_write_bytes(self.csv, self.frame().to_csv(index=False).encode())


class ResultStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs = directory / "logs"
        self.runs = _Table(directory, "runs", RunRow, "run_id")
        self.probes = _Table(directory, "probes", ProbeRow, "probe_id")
        self.sweep_json = directory / SWEEP_JSON

    def create(self, meta: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.write_meta(meta)

    def read_meta(self) -> dict[str, Any]:
        return dict(json.loads(self.sweep_json.read_text()))

    def write_meta(self, meta: dict[str, Any]) -> None:
        """sweep.json: the given metadata plus every row stored so far."""
        document = {
            **meta,
            "runs": to_json_records(self.runs.rows()),
            "probes": to_json_records(self.probes.rows()),
        }
        _atomic_write_bytes(self.sweep_json, json.dumps(document, indent=2).encode())

    def write_profile(self, run_id: str, summary: dict[str, Any]) -> None:
        """--profile: one run's trace summary, read back by the report's appendix."""
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.logs / f"{run_id}{PROFILE_SUFFIX}"
        _atomic_write_bytes(path, json.dumps(summary, indent=2).encode())

    def profiles(self) -> dict[str, dict[str, Any]]:
        """Every stored --profile summary by run id."""
        if not self.logs.is_dir():
            return {}
        return {
            p.name.removesuffix(PROFILE_SUFFIX): json.loads(p.read_text())
            for p in sorted(self.logs.glob(f"*{PROFILE_SUFFIX}"))
        }

    def finished_run_ids(self) -> set[str]:
        """Runs a resumed sweep must not repeat (failures stay: they are results too)."""
        return {r.run_id for r in self.runs.rows() if r.status not in RETRIED_ON_RESUME}

    def finished_probe_ids(self) -> set[str]:
        return {r.probe_id for r in self.probes.rows() if r.status not in RETRIED_ON_RESUME}

    def drop_retried(self) -> int:
        """Remove the rows a resume runs again (see RETRIED_ON_RESUME); returns how many."""
        rows = self.runs.rows()
        kept = [r for r in rows if r.status not in RETRIED_ON_RESUME]
        if len(kept) != len(rows) or not self.runs.csv.exists():
            self.runs.replace_all(kept)
        return len(rows) - len(kept)

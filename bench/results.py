"""Storing results as each run finishes: sweep.json (the source of truth) and its views,
Parquet (typed) and CSV (for people and spreadsheets).

sweep.json holds the configuration, system, state and every row. Every change writes it first,
then rebuilds the four views from it; each file is written to a temporary name and renamed over
the old one, so a crash or Ctrl-C at any moment leaves either the previous or the new complete
file, never a torn one. Each Parquet file also carries the metadata (sweep.json without its
rows), so that a damaged or deleted sweep.json can be rebuilt from the views. Opening a sweep
(`load`: --resume, python -m bench.report) reads what survives (bench.salvage), keeps a damaged
file aside as <name>.damaged, and rewrites every file from the recovered sweep.

A finished row (any status but interrupted/unavailable) is never replaced unless the caller
says so (`overwrite=True`): a resumed sweep cannot measure a run twice by accident.

Layout of a sweep directory:
    sweep.json            config, system info, state, runs and probes (the source of truth)
    runs.parquet/.csv     one row per run (schema.RunRow), rebuilt from sweep.json
    probes.parquet/.csv   one row per allreduce probe (schema.ProbeRow), rebuilt from sweep.json
    per_gpu.parquet/.csv  the per-gpu check's fleet table (bench.report.per_gpu), by bench.report
    controller.lock       the controller running the sweep (bench.sweep_lock)
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

from bench.salvage import (
    META_KEY,
    RETRIED_ON_RESUME,
    ROW_LISTS,
    SWEEP_JSON,
    TABLES,
    StoreError,
    recover,
)
from bench.schema import Row, to_frame, to_json_records, to_table

__all__ = [
    "RETRIED_ON_RESUME",
    "SWEEP_JSON",
    "ResultStore",
    "StoreError",
    "atomic_write_bytes",
    "write_views",
]

PROFILE_SUFFIX = ".profile.json"
DAMAGED_SUFFIX = ".damaged"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_write_parquet(path: Path, rows: list[Row], cls: type[Row], meta: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    table = to_table(rows, cls)
    metadata = {**(table.schema.metadata or {}), META_KEY: meta}
    pq.write_table(table.replace_schema_metadata(metadata), tmp)
    os.replace(tmp, path)


def write_views(
    directory: Path, name: str, rows: list[Row], cls: type[Row], meta: bytes = b"{}"
) -> None:
    """<name>.parquet (carrying `meta`) and <name>.csv of `rows`, each replaced atomically."""
    _atomic_write_parquet(directory / f"{name}.parquet", rows, cls, meta)
    csv = to_frame(rows, cls).to_csv(index=False).encode()
    atomic_write_bytes(directory / f"{name}.csv", csv)


class _Table:
    """One row type: its rows (held by the store) and its two views, <name>.parquet and
    <name>.csv. A later row replaces an earlier one with the same id only while that one is
    not finished (a resumed run replaces its "interrupted" row)."""

    def __init__(self, store: ResultStore, name: str) -> None:
        self.store = store
        self.cls, self.key = TABLES[name]
        self.parquet = store.directory / f"{name}.parquet"
        self.csv = store.directory / f"{name}.csv"
        self.held: list[Any] = []

    def rows(self) -> list[Any]:
        self.store.load()
        return list(self.held)

    def frame(self) -> pd.DataFrame:
        return to_frame(self.rows(), self.cls)

    def append(self, row: Any, *, overwrite: bool = False) -> None:
        self.store.load()
        key = getattr(row, self.key)
        earlier = [r for r in self.held if getattr(r, self.key) == key]
        if earlier and earlier[0].status not in RETRIED_ON_RESUME and not overwrite:
            raise StoreError(
                f"{self.store.directory}: {key} is already recorded as {earlier[0].status}; "
                "a finished row is not replaced (overwrite=True replaces it)"
            )
        self.held = [r for r in self.held if getattr(r, self.key) != key] + [row]
        self.store.save()

    def write_views(self, meta: bytes) -> None:
        write_views(self.store.directory, self.parquet.stem, self.held, self.cls, meta)


class ResultStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs = directory / "logs"
        self.sweep_json = directory / SWEEP_JSON
        self.runs = _Table(self, "runs")
        self.probes = _Table(self, "probes")
        self.meta: dict[str, Any] | None = None  # sweep.json without its rows, once loaded

    def create(self, meta: dict[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.meta = {}
        self.write_meta(meta)

    def load(self) -> list[str]:
        """Read the sweep once, rebuilding every file from what survives; returns what was
        wrong, file by file (empty for a sound directory). StoreError when it cannot."""
        if self.meta is not None:
            return []
        if not self.directory.is_dir():
            raise StoreError(f"{self.directory} is not a directory")
        recovered = recover(self.directory)
        self.runs.held, self.probes.held = recovered.rows["runs"], recovered.rows["probes"]
        self.meta = recovered.meta
        messages = self._problems(recovered.problems) + recovered.notes
        for path in recovered.problems:
            if path.exists():  # damaged: kept for a person to look at, never silently lost
                os.replace(path, path.with_name(path.name + DAMAGED_SUFFIX))
        self.save()
        return messages

    def _problems(self, problems: dict[Path, str]) -> list[str]:
        """One line per file that could not be used (a view missing from a sweep with no
        rows of its kind, as a controller killed while saving its first rows leaves, is no
        problem)."""
        lines = []
        for path, problem in problems.items():
            table = next((t for t in (self.runs, self.probes) if path in (t.parquet, t.csv)), None)
            if problem == "missing" and table is not None and not table.held:
                continue
            kept = f", kept as {path.name}{DAMAGED_SUFFIX}" if problem != "missing" else ""
            lines.append(f"{path.name} was {problem}{kept}; rebuilt from what survives")
        return lines

    def read_meta(self) -> dict[str, Any]:
        self.load()
        return dict(self.meta or {})

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Replace the sweep's metadata (the rows stay) and save."""
        self.load()
        self.meta = {k: v for k, v in meta.items() if k not in ROW_LISTS}
        self.save()

    def save(self) -> None:
        """sweep.json first (the truth), then the views rebuilt from the same rows."""
        meta = self.meta or {}
        document = {
            **meta,
            "runs": to_json_records(self.runs.held),
            "probes": to_json_records(self.probes.held),
        }
        atomic_write_bytes(self.sweep_json, json.dumps(document, indent=2).encode())
        packed = json.dumps(meta).encode()
        for table in (self.runs, self.probes):
            table.write_views(packed)

    def write_profile(self, run_id: str, summary: dict[str, Any]) -> None:
        """--profile: one run's trace summary, read back by the report's appendix."""
        self.logs.mkdir(parents=True, exist_ok=True)
        path = self.logs / f"{run_id}{PROFILE_SUFFIX}"
        atomic_write_bytes(path, json.dumps(summary, indent=2).encode())

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
        self.runs.held = [r for r in rows if r.status not in RETRIED_ON_RESUME]
        self.save()
        return len(rows) - len(self.runs.held)

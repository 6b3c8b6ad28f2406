"""Storing results as each run finishes: sweep.json (the source of truth) and its views,
Parquet (typed) and CSV (for people and spreadsheets).

sweep.json holds the configuration, system, state and every row. Every change writes it first,
then rebuilds the four views from it; each file is written to a temporary name and renamed over
the old one, so a crash or Ctrl-C at any moment leaves either the previous or the new complete
file, never a torn one. Each Parquet file also carries the metadata (sweep.json without its
rows), so that a damaged or deleted sweep.json can be rebuilt from the views. Opening a sweep
(`load`: --resume, python -m bench.report) reads what survives (`recover`, at the end: every
reader returns what its file holds or why it cannot, missing or damaged with the reason, never a
library traceback), keeps a damaged file aside as <name>.damaged, and rewrites every file from
the recovered sweep.

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

import contextlib
import csv
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from bench.schema import (
    ProbeRow,
    Row,
    RunRow,
    Status,
    column_types,
    columns,
    from_records,
    to_frame,
    to_json_records,
    to_table,
)

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


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` that replaces it once written; removed, and `path` left
    as it was, when writing fails (a full disk)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with _replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _atomic_write_parquet(path: Path, rows: list[Row], cls: type[Row], meta: bytes) -> None:
    table = to_table(rows, cls)
    metadata = {**(table.schema.metadata or {}), META_KEY: meta}
    with _replacing(path) as tmp:
        pq.write_table(table.replace_schema_metadata(metadata), tmp)


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

    def finished_ids(self) -> set[str]:
        """Rows a resumed sweep must not repeat (failures stay: they are results too)."""
        return {getattr(r, self.key) for r in self.rows() if r.status not in RETRIED_ON_RESUME}

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

    def drop_retried(self) -> int:
        """Remove the rows a resume runs again (see RETRIED_ON_RESUME); returns how many."""
        rows = self.runs.rows()
        self.runs.held = [r for r in rows if r.status not in RETRIED_ON_RESUME]
        self.save()
        return len(rows) - len(self.runs.held)


# ---- reading a sweep directory that may be damaged: what each file still holds, and the sweep
# rebuilt from what survives, truth first, naming every file it could not use (`recover`)

SWEEP_JSON = "sweep.json"
META_KEY = b"bench.sweep"  # the sweep's metadata inside each Parquet view
ROW_LISTS = ("runs", "probes")
# Rows a resumed sweep runs again: cut short, or not launched because the launcher was missing
# (it may have been installed since). Every other status is a finished row.
RETRIED_ON_RESUME = frozenset({Status.INTERRUPTED.value, Status.UNAVAILABLE.value})


class StoreError(Exception):
    """A sweep directory that cannot be used as it is; the message says how to recover."""


@dataclass(frozen=True)
class Readout:
    """What one file gave: its content, or why not ("missing", "damaged (...)")."""

    path: Path
    content: Any = None
    problem: str = ""


def _damaged(path: Path, exc: BaseException) -> Readout:
    reason = str(exc).splitlines()[0][:200] if str(exc) else ""
    return Readout(path, problem=f"damaged ({type(exc).__name__}: {reason})")


def read_document(path: Path) -> Readout:
    """sweep.json as a dict with its row lists."""
    if not path.exists():
        return Readout(path, problem="missing")
    try:
        document = json.loads(path.read_text())
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        if not all(isinstance(document.get(name), list) for name in ROW_LISTS):
            raise ValueError("its runs or probes are not lists")
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError included
        return _damaged(path, exc)
    return Readout(path, document)


def read_parquet(path: Path, cls: type) -> tuple[Readout, dict[str, Any] | None]:
    """A Parquet view's rows, and the sweep metadata it carries (None when it is unreadable)."""
    if not path.exists():
        return Readout(path, problem="missing"), None
    try:
        table = pq.read_table(path)
        rows = from_records(table.to_pylist(), cls)
        meta = json.loads(table.schema.metadata[META_KEY])
    except Exception as exc:  # pyarrow raises several kinds for a torn file
        return _damaged(path, exc), None
    return Readout(path, rows), meta


def read_csv(path: Path, cls: type) -> Readout:
    """A CSV view's rows: the header must be the schema's and every record complete (a torn
    last line would otherwise read as a row with its last columns missing)."""
    if not path.exists():
        return Readout(path, problem="missing")
    try:
        text = path.read_text()
        records = list(csv.reader(io.StringIO(text), strict=True))
        header = list(columns(cls))
        if not records or records[0] != header:
            raise ValueError("its header is not the row schema's")
        if not text.endswith("\n") or any(len(r) != len(header) for r in records[1:]):
            raise ValueError("a record is cut short")
        strings = {n: "string" for n, kind in column_types(cls).items() if kind is str}
        frame = pd.read_csv(io.StringIO(text), dtype=strings)  # type: ignore[arg-type]
        rows = from_records(frame.to_dict(orient="records"), cls)
    except (OSError, ValueError, csv.Error) as exc:
        return _damaged(path, exc)
    return Readout(path, rows)


@dataclass
class Recovered:
    """A sweep as rebuilt from its files, and what was wrong with which file."""

    meta: dict[str, Any]
    rows: dict[str, list[Any]]  # "runs"/"probes" -> rows
    problems: dict[Path, str] = field(default_factory=dict)  # file -> "missing", "damaged (...)"
    notes: list[str] = field(default_factory=list)  # rows kept from a view sweep.json lacked


def merge_rows(sources: list[tuple[str, list[Any]]], key: str) -> tuple[list[Any], list[str]]:
    """Rows of the first source, plus every finished row a later source has and no earlier
    one does (never lose a measured row); notes name the source that held them."""
    merged = list(sources[0][1]) if sources else []
    seen = {getattr(r, key) for r in merged}
    notes = []
    for name, rows in sources[1:]:
        extra = [r for r in rows if getattr(r, key) not in seen]
        extra = [r for r in extra if r.status not in RETRIED_ON_RESUME]
        if extra:
            ids = ", ".join(getattr(r, key) for r in extra)
            notes.append(f"{name} held {len(extra)} finished row(s) the others lack ({ids}): kept")
        merged += extra
        seen |= {getattr(r, key) for r in extra}
    return merged, notes


TABLES: dict[str, tuple[type, str]] = {"runs": (RunRow, "run_id"), "probes": (ProbeRow, "probe_id")}


def _view_sources(
    directory: Path, name: str, cls: type, describe: Callable[[Path], str], recovered: Recovered
) -> tuple[list[tuple[str, list[Any]]], dict[str, Any] | None]:
    """A table's readable views, in order of trust; problems go into `recovered`."""
    parquet, meta = read_parquet(directory / f"{name}.parquet", cls)
    sources = []
    for readout in (parquet, read_csv(directory / f"{name}.csv", cls)):
        if readout.problem:
            recovered.problems[readout.path] = readout.problem
        else:
            sources.append((describe(readout.path), readout.content))
    return sources, meta


def recover(directory: Path, describe: Callable[[Path], str] = lambda p: p.name) -> Recovered:
    """The sweep in `directory` from what survives: sweep.json's rows, plus finished rows only
    a view still holds; when sweep.json cannot be read, the Parquet views, then the CSV ones,
    with the metadata a Parquet view carries. StoreError when no file holds the configuration."""
    truth = read_document(directory / SWEEP_JSON)
    recovered = Recovered({}, {})
    if truth.problem:
        recovered.problems[truth.path] = truth.problem
    document = truth.content or {}
    metas = []
    for name, (cls, key) in TABLES.items():
        views, meta = _view_sources(directory, name, cls, describe, recovered)
        metas.append(meta)
        sources = views
        if not truth.problem:
            skipped: list[str] = []
            rows = from_records(document.get(name) or [], cls, skipped)
            if skipped:  # the file is kept as it was; the rows views still hold come back
                said = recovered.problems.get(truth.path, "damaged (").removesuffix(")")
                recovered.problems[truth.path] = f"{said}{name}: {'; '.join(skipped)})"
            sources = [(describe(truth.path), rows), *views]
        recovered.rows[name], notes = merge_rows(sources, key)
        recovered.notes += notes
    if truth.problem:
        recovered.meta = next((m for m in metas if m), {})
    else:
        recovered.meta = {k: v for k, v in document.items() if k not in ROW_LISTS}
    if truth.problem and not recovered.meta:
        raise StoreError(
            f"{truth.path} is {truth.problem} and no runs.parquet or probes.parquet beside it "
            "holds the sweep's configuration: restore sweep.json from a copy of the directory, "
            "or start a new sweep (the rows that survive are in runs.csv)"
        )
    return recovered

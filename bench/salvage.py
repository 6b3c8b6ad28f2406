"""Reading a sweep directory that may be damaged: what each file still holds, and the sweep
rebuilt from what survives.

sweep.json is the sweep's one source of truth (configuration, system, state, every row);
runs/probes .parquet and .csv are views of it, and each Parquet file also carries the sweep's
metadata (sweep.json without its rows) so that sweep.json itself can be rebuilt from them. Every
reader here returns what its file holds or why it cannot (missing, or damaged with the reason),
never a library traceback; `recover` merges what survives, truth first, and names every file
it could not use. bench.results writes the rebuilt files.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from bench.schema import ProbeRow, RunRow, Status, column_types, columns, from_records

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
            sources = [(describe(truth.path), from_records(document[name], cls)), *views]
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

"""Storing results as each run finishes: one append-only store, sweep.jsonl, and views derived
from it.

sweep.jsonl holds one JSON object per line, each appended and flushed to disk (fsync) as it
happens, the way DeepLearningExamples' dllogger writes its JSON lines:
    {"meta": {...}}    the sweep's configuration, system and state; each line updates the keys it
                       carries (the first carries them all)
    {"run": {...}}     a run's row (schema.RunRow)
    {"probe": {...}}   an all-reduce probe's row (schema.ProbeRow)
A crash, kill -9 or full disk at any moment loses at most the line being written: reading the store
drops a last line cut short and names it. A line that does not read (edited by hand, a damaged
disk) is left out and named, and the file is kept as sweep.jsonl.damaged before the store is
rewritten from what reads. Rewriting (a resume dropping the rows it runs again, or a repair) writes
a temporary file and renames it over the store, so the store is never half written.

A finished row (any status but interrupted/unavailable) is never replaced unless the caller says
so (`overwrite=True`): a resumed sweep cannot measure a run twice by accident.

Where each file of a sweep's directory lies: bench.paths.SweepPaths.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.paths import SweepPaths
from bench.schema import (
    ProbeRow,
    Row,
    RunRow,
    Status,
    arrow_schema,
    from_records,
    to_frame,
    to_json_records,
)

DAMAGED_SUFFIX = ".damaged"
# Rows a resumed sweep runs again: cut short, or not launched because the launcher was missing
# (it may have been installed since). Every other status is a finished row.
RETRIED_ON_RESUME = frozenset({Status.INTERRUPTED.value, Status.UNAVAILABLE.value})


class StoreError(Exception):
    """A sweep directory that cannot be used as it is; the message says how to recover."""


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


def write_views(views: tuple[Path, Path], rows: list[Row], cls: type[Row]) -> None:
    """The Parquet and CSV views of `rows` (SweepPaths.views), each replaced atomically."""
    parquet, csv = views
    frame = to_frame(rows, cls)
    with _replacing(parquet) as tmp:
        frame.to_parquet(tmp, schema=arrow_schema(cls), index=False)
    atomic_write_bytes(csv, frame.to_csv(index=False).encode())


def _line(kind: str, record: dict[str, Any]) -> bytes:
    return (json.dumps({kind: record}) + "\n").encode()


class _Table:
    """One row type, its rows by id in the order they were last written. A later row replaces
    an earlier one with the same id only while that one is not finished (a resumed run replaces
    its "interrupted" row)."""

    def __init__(self, store: ResultStore, kind: str, cls: type[Row], key: str) -> None:
        self.store, self.kind, self.cls, self.key = store, kind, cls, key
        self.held: dict[str, Any] = {}

    def rows(self) -> list[Any]:
        self.store.load()
        return list(self.held.values())

    def finished_ids(self) -> set[str]:
        """Rows a resumed sweep must not repeat (failures stay: they are results too)."""
        self.store.load()
        return {key for key, r in self.held.items() if r.status not in RETRIED_ON_RESUME}

    def hold(self, row: Any) -> None:
        key = getattr(row, self.key)
        self.held.pop(key, None)
        self.held[key] = row

    def append(self, row: Any, *, overwrite: bool = False) -> None:
        self.store.load()
        earlier = self.held.get(getattr(row, self.key))
        if earlier is not None and earlier.status not in RETRIED_ON_RESUME and not overwrite:
            raise StoreError(
                f"{self.store.directory}: {getattr(row, self.key)} is already recorded as "
                f"{earlier.status}; a finished row is not replaced (overwrite=True replaces it)"
            )
        self.store.append(_line(self.kind, to_json_records([row])[0]))
        self.hold(row)


class ResultStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths = SweepPaths(directory)
        self.runs = _Table(self, "run", RunRow, "run_id")
        self.probes = _Table(self, "probe", ProbeRow, "probe_id")
        self.meta: dict[str, Any] | None = None  # once loaded

    def create(self, meta: dict[str, Any]) -> None:
        """A new store holding only the sweep's metadata."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.paths.logs.mkdir(exist_ok=True)
        self.meta = json.loads(json.dumps(meta))
        self.runs.held, self.probes.held = {}, {}
        self.save()

    def append(self, line: bytes) -> None:
        """One line at the end of the store, on disk when this returns. A write that fails (a
        full disk) is cut back off, so the store ends with a whole line."""
        with open(self.paths.store, "ab") as f:
            size = f.tell()
            try:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                with contextlib.suppress(OSError):
                    f.truncate(size)
                raise

    def load(self) -> list[str]:
        """Read the store once; returns what was wrong with it, line by line (empty for a sound
        one), after keeping it as sweep.jsonl.damaged and rewriting it from what reads.
        StoreError when there is no store or it holds no configuration."""
        if self.meta is not None:
            return []
        if not self.directory.is_dir():
            raise StoreError(f"{self.directory} is not a directory")
        self.meta = {}
        store = self.paths.store
        if not store.exists() and self.paths.earlier_store.exists():
            problems = self._read_earlier(self.paths.earlier_store)
            self.save()
            return problems
        try:
            data = store.read_bytes()
        except FileNotFoundError:
            raise StoreError(
                f"{store} is missing: it is the only record of the sweep's runs. Restore it "
                "from a copy of the directory, or start a new sweep"
            ) from None
        problems = self._read_lines(data)
        if "config" not in self.meta:
            raise StoreError(
                f"{store} holds no configuration: restore it from a copy of the directory, "
                "or start a new sweep"
            )
        if problems:
            os.replace(store, store.with_name(store.name + DAMAGED_SUFFIX))
            self.save()
            problems.append(f"kept as {store.name}{DAMAGED_SUFFIX}; rewritten from the rest")
        return problems

    def _read_lines(self, data: bytes) -> list[str]:
        problems, lines = [], data.split(b"\n")
        if lines[-1]:  # no newline at the end: the last write was cut short
            problems.append(
                f"{self.paths.store.name}: its last line was cut short (a crash while writing)"
            )
        tables = {t.kind: t for t in (self.runs, self.probes)}
        for number, line in enumerate(lines[:-1], 1):
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or len(record) != 1:
                    raise ValueError("not an object with one key")
                ((kind, value),) = record.items()
                if kind == "meta" and isinstance(value, dict):
                    self.meta.update(value)
                    continue
                if kind not in tables:
                    raise ValueError(f"unknown kind {kind!r}")
                tables[kind].hold(from_records([value], tables[kind].cls)[0])
            except ValueError as error:  # JSONDecodeError and UnicodeDecodeError included
                problems.append(
                    f"{self.paths.store.name} line {number} left out: {str(error)[:200]}"
                )
        return problems

    def _read_earlier(self, path: Path) -> list[str]:
        """A sweep saved as sweep.json by an earlier version: its rows, into a new store."""
        try:
            document = json.loads(path.read_text())
            self.meta = {k: v for k, v in document.items() if k not in ("runs", "probes")}
            skipped: list[str] = []
            for table, name in ((self.runs, "runs"), (self.probes, "probes")):
                for row in from_records(document.get(name) or [], table.cls, skipped):
                    table.hold(row)
        except (OSError, ValueError, AttributeError) as error:
            raise StoreError(f"{path} does not read ({error}): restore it from a copy") from None
        return [f"{path.name} (an earlier version's) read into {self.paths.store.name}", *skipped]

    def read_meta(self) -> dict[str, Any]:
        """A copy of the metadata: changing it changes the store only through write_meta."""
        self.load()
        return copy.deepcopy(self.meta or {})

    def write_meta(self, meta: dict[str, Any]) -> None:
        """Record the keys of the sweep's metadata that changed (the rows stay)."""
        self.load()
        held, given = self.meta or {}, json.loads(json.dumps(meta))
        changed = {k: v for k, v in given.items() if k not in held or held[k] != v}
        if changed:
            self.append(_line("meta", changed))
            self.meta = {**held, **changed}

    def save(self) -> None:
        """The store rewritten whole from what is held: the metadata, then every row."""
        lines = [_line("meta", self.meta or {})]
        for table in (self.runs, self.probes):
            lines += [_line(table.kind, r) for r in to_json_records(list(table.held.values()))]
        atomic_write_bytes(self.paths.store, b"".join(lines))

    def write_views(self) -> None:
        """runs.parquet/.csv and probes.parquet/.csv from the store."""
        for table, name in ((self.runs, "runs"), (self.probes, "probes")):
            write_views(self.paths.views(name), table.rows(), table.cls)

    def write_profile(self, run_id: str, summary: dict[str, Any]) -> None:
        """--profile: one run's trace summary, read back by the report's appendix."""
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.paths.profile(run_id), json.dumps(summary, indent=2).encode())

    def profiles(self) -> dict[str, dict[str, Any]]:
        """Every stored --profile summary by run id."""
        suffix = SweepPaths.PROFILE
        return {
            p.name.removesuffix(suffix): json.loads(p.read_text())
            for p in sorted(self.paths.logs.glob(f"*{suffix}"))
        }

    def drop_retried(self) -> None:
        """Remove the rows a resume runs again (see RETRIED_ON_RESUME)."""
        rows = self.runs.rows()
        self.runs.held = {r.run_id: r for r in rows if r.status not in RETRIED_ON_RESUME}
        self.save()

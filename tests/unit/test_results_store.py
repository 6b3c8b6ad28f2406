"""The results store: sweep.jsonl, appended to as each row is recorded, is the only source of the
rows; the views are derived from it; a line cut short or damaged is named and left out, the rest
kept; a finished row is never replaced by accident; and the controller's lock."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from bench_builders import run_row, with_status

from bench import sweep_lock
from bench.paths import SweepPaths
from bench.report.__main__ import main as report_main
from bench.results import ResultStore, StoreError
from bench.schema import RunRow, to_json_records

META = {"sweep_id": "s1", "config": {"device": "cpu"}, "state": "running"}


def sweep_with_rows(directory: Path) -> list[RunRow]:
    store = ResultStore(directory)
    store.create(META)
    rows = [
        run_row(run_id="a"),
        with_status(run_row(run_id="b"), "failed", "RuntimeError: x\ny"),
        with_status(run_row(run_id="c"), "interrupted"),
    ]
    for row in rows:
        store.runs.append(row)
    return rows


def lines(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "sweep.jsonl").read_text().splitlines()]


def reopened(directory: Path) -> tuple[ResultStore, list[str]]:
    store = ResultStore(directory)
    return store, store.load()


def test_each_row_is_one_line_appended_to_the_store(tmp_path: Path) -> None:
    rows = sweep_with_rows(tmp_path)
    assert lines(tmp_path) == [{"meta": META}, *({"run": r} for r in to_json_records(rows))]
    store = ResultStore(tmp_path)
    store.write_meta({**META, "state": "complete"})  # only what changed is appended
    assert lines(tmp_path)[-1] == {"meta": {"state": "complete"}}
    assert reopened(tmp_path)[0].read_meta() == {**META, "state": "complete"}
    assert not list(tmp_path.glob("runs.*"))  # the views come with the report
    store.write_views()
    assert pd.read_parquet(tmp_path / "runs.parquet")["run_id"].tolist() == ["a", "b", "c"]
    assert pd.read_csv(tmp_path / "runs.csv")["run_id"].tolist() == ["a", "b", "c"]
    assert not list(tmp_path.glob(".*.tmp"))  # written under a temporary name, then renamed


def test_a_last_line_cut_short_is_left_out_and_named(tmp_path: Path) -> None:
    # kill -9 or a crash while a row was being written: every whole line is kept.
    rows = sweep_with_rows(tmp_path)
    whole = (tmp_path / "sweep.jsonl").read_bytes()
    (tmp_path / "sweep.jsonl").write_bytes(whole[:-40])
    store, notes = reopened(tmp_path)
    assert notes == [
        "sweep.jsonl: its last line was cut short (a crash while writing)",
        "kept as sweep.jsonl.damaged; rewritten from the rest",
    ]
    assert store.runs.rows() == rows[:2]
    assert (tmp_path / "sweep.jsonl.damaged").read_bytes() == whole[:-40]  # kept as found
    assert reopened(tmp_path)[1] == []  # sound again
    assert reopened(tmp_path)[0].runs.rows() == rows[:2]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ({"run": {**to_json_records([run_row(run_id="a")])[0], "throughput": "fast"}},
         "line 2 left out: throughput 'fast' is not float"),
        ({"run": "garbage"}, "line 2 left out: not an object: 'garbage'"),
        ({"runs": {}}, "line 2 left out: unknown kind 'runs'"),
        ("{not json", "line 2 left out: Expecting property name enclosed in double quotes"),
    ],
)  # fmt: skip
def test_a_line_that_does_not_read_is_left_out_and_named(
    tmp_path: Path, damage: object, said: str
) -> None:
    rows = sweep_with_rows(tmp_path)
    found = (tmp_path / "sweep.jsonl").read_text().splitlines()
    found[1] = damage if isinstance(damage, str) else json.dumps(damage)
    (tmp_path / "sweep.jsonl").write_text("\n".join(found) + "\n")
    store, notes = reopened(tmp_path)
    assert notes[0].startswith(f"sweep.jsonl {said}"), notes
    assert store.runs.rows() == rows[1:]
    assert reopened(tmp_path)[1] == []


def test_without_the_store_or_its_configuration_the_sweep_cannot_be_read(tmp_path: Path) -> None:
    sweep_with_rows(tmp_path)
    ResultStore(tmp_path).write_views()
    (tmp_path / "sweep.jsonl").unlink()  # the views are not a source: nothing is re-measured
    with pytest.raises(StoreError, match=r"sweep.jsonl is missing: it is the only record"):
        ResultStore(tmp_path).load()
    (tmp_path / "sweep.jsonl").write_text('{"run": {}}\n')
    with pytest.raises(StoreError, match=r"holds no configuration: restore it from a copy"):
        ResultStore(tmp_path).load()


def test_a_full_disk_leaves_the_store_ending_with_a_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = sweep_with_rows(tmp_path)
    store = ResultStore(tmp_path)
    store.load()
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        store.runs.append(run_row(run_id="d"))
    monkeypatch.setattr(os, "fsync", real_fsync)
    store, notes = reopened(tmp_path)
    assert notes == [] and store.runs.rows() == rows


def test_an_earlier_version_s_sweep_json_is_read_into_a_store(tmp_path: Path) -> None:
    rows = sweep_with_rows(tmp_path / "new")
    document = {**META, "runs": to_json_records(rows), "probes": []}
    (tmp_path / "sweep.json").write_text(json.dumps(document))
    store, notes = reopened(tmp_path)
    assert notes == ["sweep.json (an earlier version's) read into sweep.jsonl"]
    assert store.runs.rows() == rows and store.read_meta() == META
    assert reopened(tmp_path)[0].runs.rows() == rows  # from sweep.jsonl now


def test_a_finished_row_is_not_replaced_without_the_flag(tmp_path: Path) -> None:
    sweep_with_rows(tmp_path)
    store = ResultStore(tmp_path)
    with pytest.raises(StoreError, match="a is already recorded as ok"):
        store.runs.append(run_row(run_id="a", throughput=1.0))
    store.runs.append(run_row(run_id="c"))  # an interrupted run is measured again
    store.runs.append(run_row(run_id="a", throughput=1.0), overwrite=True)
    assert {r.run_id: r.throughput for r in store.runs.rows()}["a"] == 1.0
    assert {r.run_id: r.throughput for r in reopened(tmp_path)[0].runs.rows()}["a"] == 1.0


def test_report_writes_the_views_again_and_stops_without_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_with_rows(tmp_path)
    assert report_main([str(tmp_path)]) == 0
    (tmp_path / "runs.parquet").write_bytes(b"PAR1")  # a damaged view: written again
    (tmp_path / "runs.csv").unlink()
    assert report_main([str(tmp_path)]) == 0
    assert pd.read_csv(tmp_path / "runs.csv")["run_id"].tolist() == ["a", "b", "c"]
    assert pd.read_parquet(tmp_path / "runs.parquet")["run_id"].tolist() == ["a", "b", "c"]
    (tmp_path / "sweep.jsonl").unlink()
    assert report_main([str(tmp_path)]) == 2
    assert "sweep.jsonl is missing" in capsys.readouterr().err


# --- the controller's lock ----------------------------------------------------------------------


def test_a_live_controller_s_lock_refuses_a_second_one(tmp_path: Path) -> None:
    first = sweep_lock.acquire(tmp_path)
    with pytest.raises(sweep_lock.LockHeld, match=f"pid {os.getpid()} on ") as refused:
        sweep_lock.acquire(tmp_path)
    assert "Wait for it to end" in str(refused.value)
    first.release()
    assert not SweepPaths(tmp_path).lock.exists()
    sweep_lock.acquire(tmp_path).release()


HOLD = """
import sys
from pathlib import Path
from bench import sweep_lock
sweep_lock.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_controller_that_dies_holding_the_lock_leaves_it_free(tmp_path: Path) -> None:
    # Another process takes the lock and holds it until it is killed: no cleanup of its own.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(sweep_lock.LockHeld, match=f"pid {holder.pid} on "):
            sweep_lock.acquire(tmp_path)
    finally:
        holder.kill()
        holder.wait()
    left = sweep_lock.read_holder(SweepPaths(tmp_path).lock)
    assert left is not None and left.pid == holder.pid
    notes: list[str] = []
    lock = sweep_lock.acquire(tmp_path, notes)
    assert lock.holder.pid == os.getpid()
    assert notes == [f"took over the lock of {left.describe()}: no longer running"]
    lock.release()


def test_a_lock_from_another_host_is_refused_with_how_to_release_it(tmp_path: Path) -> None:
    other = sweep_lock.Holder(1, "elsewhere.example", "2026-11-24T00:00:00+00:00", "x")
    path = SweepPaths(tmp_path).lock
    path.write_text(json.dumps(other.__dict__))
    with pytest.raises(sweep_lock.LockHeld, match=f"another host.*remove {path}"):
        sweep_lock.acquire(tmp_path)
    assert sweep_lock.read_holder(path) == other  # left as it was

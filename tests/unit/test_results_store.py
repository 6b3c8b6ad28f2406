"""The results store: sweep.json is the source of truth, the views are rebuilt from
it, a damaged or missing file is named and rebuilt from what survives, a finished row is never
replaced by accident, and the controller's lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from bench_builders import run_row, with_status

from bench import sweep_lock
from bench.report.__main__ import main as report_main
from bench.results import ResultStore, StoreError, read_csv
from bench.schema import RunRow

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


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def reopened(directory: Path) -> tuple[ResultStore, list[str]]:
    store = ResultStore(directory)
    return store, store.load()


def test_every_file_is_written_from_the_same_rows(tmp_path: Path) -> None:
    rows = sweep_with_rows(tmp_path)
    document = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["run_id"] for r in document["runs"]] == ["a", "b", "c"]
    assert pd.read_parquet(tmp_path / "runs.parquet")["run_id"].tolist() == ["a", "b", "c"]
    assert read_csv(tmp_path / "runs.csv", RunRow).content == rows
    assert not list(tmp_path.glob(".*.tmp"))  # written under a temporary name, then renamed


@pytest.mark.parametrize("damage", ["delete", "truncate"])
@pytest.mark.parametrize("name", ["runs.parquet", "runs.csv", "sweep.json"])
def test_a_damaged_or_missing_file_is_named_and_rebuilt(
    tmp_path: Path, name: str, damage: str
) -> None:
    rows = sweep_with_rows(tmp_path)
    before = json.loads((tmp_path / "sweep.json").read_text())
    truncate(tmp_path / name) if damage == "truncate" else (tmp_path / name).unlink()
    store, notes = reopened(tmp_path)
    assert len(notes) == 1 and notes[0].startswith(f"{name} was ")
    assert ("missing" if damage == "delete" else "damaged (") in notes[0]
    assert store.runs.rows() == rows and store.read_meta()["config"] == META["config"]
    assert json.loads((tmp_path / "sweep.json").read_text()) == before  # rebuilt as it was
    assert reopened(tmp_path)[0].runs.rows() == rows
    assert reopened(tmp_path)[1] == []  # sound again
    assert (tmp_path / f"{name}.damaged").exists() == (damage == "truncate")


def test_sweep_json_and_the_parquet_views_lost_together_cannot_be_rebuilt(tmp_path: Path) -> None:
    sweep_with_rows(tmp_path)
    truncate(tmp_path / "sweep.json")
    for name in ("runs.parquet", "probes.parquet"):
        (tmp_path / name).unlink()
    with pytest.raises(StoreError, match=r"sweep.json is damaged .* restore sweep.json"):
        ResultStore(tmp_path).load()


def test_a_finished_row_only_a_view_holds_is_kept(tmp_path: Path) -> None:
    # sweep.json restored from an older copy: the views hold a run it lacks
    rows = sweep_with_rows(tmp_path)
    older = json.loads((tmp_path / "sweep.json").read_text())
    older["runs"] = older["runs"][1:]
    (tmp_path / "sweep.json").write_text(json.dumps(older))
    store, notes = reopened(tmp_path)
    assert notes == ["runs.parquet held 1 finished row(s) the others lack (a): kept"]
    assert sorted(r.run_id for r in store.runs.rows()) == sorted(r.run_id for r in rows)


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ({"throughput": "fast"}, "row 1 left out: throughput 'fast' is not float"),
        ("garbage", "row 1 left out: not an object: 'garbage'"),
    ],
)
def test_a_malformed_row_in_sweep_json_is_left_out_and_named_and_the_views_bring_it_back(
    tmp_path: Path, damage: object, said: str
) -> None:
    rows = sweep_with_rows(tmp_path)
    document = json.loads((tmp_path / "sweep.json").read_text())
    if isinstance(damage, dict):
        document["runs"][0].update(damage)
    else:
        document["runs"][0] = damage
    (tmp_path / "sweep.json").write_text(json.dumps(document))
    store, notes = reopened(tmp_path)
    assert notes[0] == (
        f"sweep.json was damaged (runs: {said}), kept as sweep.json.damaged; rebuilt from what "
        "survives"
    )
    assert notes[1:] == [
        f"runs.parquet held 1 finished row(s) the others lack ({rows[0].run_id}): kept"
    ]
    assert sorted(r.run_id for r in store.runs.rows()) == sorted(r.run_id for r in rows)
    assert json.loads((tmp_path / "sweep.json.damaged").read_text()) == document  # kept as found
    assert reopened(tmp_path)[1] == []  # sound again


def test_a_finished_row_is_not_replaced_without_the_flag(tmp_path: Path) -> None:
    sweep_with_rows(tmp_path)
    store = ResultStore(tmp_path)
    with pytest.raises(StoreError, match="a is already recorded as ok"):
        store.runs.append(run_row(run_id="a", throughput=1.0))
    store.runs.append(run_row(run_id="c"))  # an interrupted run is measured again
    store.runs.append(run_row(run_id="a", throughput=1.0), overwrite=True)
    assert {r.run_id: r.throughput for r in store.runs.rows()}["a"] == 1.0


def test_report_rebuilds_the_views_and_names_the_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep_with_rows(tmp_path)
    truncate(tmp_path / "runs.parquet")
    (tmp_path / "runs.csv").unlink()
    assert report_main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "runs.parquet was damaged" in err and "runs.csv was missing" in err
    assert pd.read_csv(tmp_path / "runs.csv")["run_id"].tolist() == ["a", "b", "c"]
    (tmp_path / "runs.parquet").unlink()
    truncate(tmp_path / "sweep.json")
    (tmp_path / "probes.parquet").unlink()
    assert report_main([str(tmp_path)]) == 2  # nothing holds the configuration any more
    assert "restore sweep.json from a copy" in capsys.readouterr().err


# --- the controller's lock ----------------------------------------------------------------------


def test_a_live_controller_s_lock_refuses_a_second_one(tmp_path: Path) -> None:
    first = sweep_lock.acquire(tmp_path)
    with pytest.raises(sweep_lock.LockHeld, match=f"pid {os.getpid()} on ") as refused:
        sweep_lock.acquire(tmp_path)
    assert "Wait for it to end" in str(refused.value)
    first.release()
    assert not (tmp_path / sweep_lock.LOCK_NAME).exists()
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
    left = sweep_lock.read_holder(tmp_path / sweep_lock.LOCK_NAME)
    assert left is not None and left.pid == holder.pid
    notes: list[str] = []
    lock = sweep_lock.acquire(tmp_path, notes)
    assert lock.holder.pid == os.getpid()
    assert notes == [f"took over the lock of {left.describe()}: no longer running"]
    lock.release()


def test_a_lock_from_another_host_is_refused_with_how_to_release_it(tmp_path: Path) -> None:
    other = sweep_lock.Holder(1, "elsewhere.example", "2026-11-24T00:00:00+00:00", "x")
    path = tmp_path / sweep_lock.LOCK_NAME
    path.write_text(json.dumps(other.__dict__))
    with pytest.raises(sweep_lock.LockHeld, match=f"another host.*remove {path}"):
        sweep_lock.acquire(tmp_path)
    assert sweep_lock.read_holder(path) == other  # left as it was

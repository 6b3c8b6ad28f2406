"""The schema (declared once) and the results store that writes it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from bench_builders import run_row, with_status

from bench.results import ResultStore
from bench.schema import ProbeRow, RunRow, Status, arrow_schema, columns, from_records, to_frame


def test_run_columns_cover_placement_and_every_knob() -> None:
    names = columns(RunRow)
    assert len(names) == len(set(names))
    for column in (
        "nodes",
        "gpus_per_node",
        "hosts",
        "interconnect",
        "backend",
        "device_name",
        "batch_per_gpu",
        "global_batch",
        "scaling",
        "precision",
        "channels_last",
        "compile",
        "bucket_cap_mb",
        "static_graph",
        "gradient_as_bucket_view",
        "broadcast_buffers",
        "fp16_allreduce",
        "data",
        "loader_workers",
        "threads_per_rank",
        "warmup_steps",
        "timed_steps",
        "throughput",
        "window_s",
        "data_wait_s",
        "status",
        "error",
        "throttle_reasons",
        "sm_clock_mhz_mean",
    ):
        assert column in names


def test_arrow_types_follow_the_dataclass() -> None:
    schema = arrow_schema(RunRow)
    assert schema.field("throughput").type == pa.float64()
    assert schema.field("images").type == pa.int64()
    assert schema.field("channels_last").type == pa.bool_()
    assert schema.field("run_id").type == pa.string()
    assert arrow_schema(ProbeRow).field("busbw_gbps").type == pa.float64()


def test_frame_round_trip_keeps_missing_measurements_missing() -> None:
    rows = [run_row(), with_status(run_row(run_id="x"), "failed", "RuntimeError: boom")]
    frame = to_frame(rows, RunRow)
    assert frame["throughput"].isna().tolist() == [False, True]
    assert frame["images"].dtype == "Int64"
    assert from_records(frame.to_dict(orient="records"), RunRow) == rows  # as read_csv reads one


def test_the_views_hold_the_stored_rows_typed(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "sweep")
    store.create({"sweep_id": "s", "state": "running"})
    first = run_row()
    second = with_status(run_row(run_id="ddp-n2-fp32-nchw-r0", gpus=2), "oom", "CUDA out of memory")
    store.runs.append(first)
    store.runs.append(second)
    assert store.runs.rows() == [first, second]
    store.write_views()
    csv = pd.read_csv(store.directory / "runs.csv")
    assert list(csv.columns) == list(columns(RunRow))
    assert csv["run_id"].tolist() == [first.run_id, second.run_id]
    assert csv["throughput"].iloc[0] == 64.0 and math.isnan(csv["throughput"].iloc[1])
    assert pq.read_schema(store.directory / "runs.parquet").equals(
        arrow_schema(RunRow), check_metadata=False
    )
    assert not list(tmp_path.glob("sweep/.*.tmp"))


def test_a_later_row_replaces_an_earlier_one_with_the_same_id(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.create({"config": {}})
    store.runs.append(with_status(run_row(), Status.INTERRUPTED.value))
    store.runs.append(run_row(run_id="other"))
    store.runs.append(run_row())
    assert [(r.run_id, r.status) for r in store.runs.rows()] == [
        ("other", "ok"),
        (run_row().run_id, "ok"),
    ]
    assert [r.status for r in ResultStore(tmp_path).runs.rows()] == ["ok", "ok"]


def test_resume_bookkeeping(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.create({"config": {}})
    store.runs.append(run_row(run_id="a"))
    store.runs.append(with_status(run_row(run_id="b"), "failed"))
    store.runs.append(with_status(run_row(run_id="c"), "interrupted"))
    store.runs.append(with_status(run_row(run_id="d"), "unavailable", "no horovodrun"))
    store.runs.append(with_status(run_row(run_id="e"), "timeout"))
    assert store.runs.finished_ids() == {"a", "b", "e"}
    store.drop_retried()
    assert [r.run_id for r in store.runs.rows()] == ["a", "b", "e"]
    assert [r.run_id for r in ResultStore(tmp_path).runs.rows()] == ["a", "b", "e"]


def test_the_store_holds_meta_and_rows_as_valid_json_lines(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.create({"sweep_id": "s", "config": {"device": "cpu"}})
    store.runs.append(with_status(run_row(), "timeout"))
    store.write_meta({"sweep_id": "s", "state": "complete"})
    text = store.paths.store.read_text()
    assert "NaN" not in text  # not JSON; Python's json would write it for a float NaN
    meta, run, state = (json.loads(line) for line in text.splitlines())
    assert state == {"meta": {"state": "complete"}}
    assert run["run"]["throughput"] is None and run["run"]["status"] == "timeout"
    assert ResultStore(tmp_path).read_meta() == {**meta["meta"], "state": "complete"}

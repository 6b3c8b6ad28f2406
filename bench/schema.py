"""The result schema, declared once.

`RunRow` is one run (one launch of one configuration and repeat): its identity, every knob
declared in bench.spec (a knob added there becomes a column here) and its measurements.
`ProbeRow` is one allreduce probe. Writing (Parquet, CSV, JSON), reading, statistics and
plotting all take their columns and types from these: every output gains a column added here.

Measurements are `None` (null/NaN in files) when a run did not produce them. A crashed run is
never a row of zeros.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

import pandas as pd
import pyarrow as pa

from bench.spec import Variant, Workload, knobs


class Status(StrEnum):
    OK = "ok"
    FAILED = "failed"  # a rank exited non-zero or the result never arrived
    OOM = "oom"  # out of (GPU) memory
    TIMEOUT = "timeout"  # killed after --timeout seconds
    INTERRUPTED = "interrupted"  # the sweep was interrupted (Ctrl-C) during this run
    UNAVAILABLE = "unavailable"  # not launched: the launcher cannot run here (e.g. no Horovod)


@dataclass(frozen=True)
class RunIdentity:
    """The first columns of a run's row: which run, how it ended, where it ran, its shape."""

    sweep_id: str
    run_id: str
    repeat: int
    launcher: str
    variant: str
    status: str
    error: str
    started_at: str
    launch_wall_s: float | None
    # placement
    nodes: int
    gpus_per_node: int
    gpus: int
    hosts: str
    device_name: str
    backend: str
    interconnect: str
    # the run's shape (the knobs follow: every Variant and Workload field with row=True)
    scaling: str
    batch_per_gpu: int
    global_batch: int
    threads_per_rank: int


@dataclass(frozen=True)
class Measurements:
    """The last columns of a run's row; None when the run produced none."""

    # the per-gpu check: the GPU (CUDA/nvidia-smi index on its node) this row measured alone;
    # None for a row that is one run over its whole placement
    gpu_index: int | None = None
    # timed window only; warm-up excluded
    images: int | None = None
    window_s: float | None = None  # slowest rank's timed window
    throughput: float | None = None  # images / window_s, img/s over all ranks
    throughput_per_gpu: float | None = None
    step_time_median_s: float | None = None  # per step, the slowest rank's time
    step_time_p90_s: float | None = None
    step_time_cv: float | None = None  # stdev / mean of the slowest rank's step times
    timed_steps_run: int | None = None  # steps in the window (more than --steps with a duration)
    warmup_steps_run: int | None = None  # untimed steps before it (warm-up until steady)
    compile_s: float | None = None  # first step, which compiled the model (slowest rank)
    rank_imbalance: float | None = None  # slowest / fastest rank window - 1
    data_wait_s: float | None = None  # worst rank's time blocked waiting for input batches
    data_wait_fraction: float | None = None
    # real data only: each rank's loader alone (no model) right after the window, all at once
    loader_throughput_per_gpu: float | None = None  # the slowest rank's loader, img/s
    loader_throughput: float | None = None  # sum over the ranks, img/s
    peak_memory_gb: float | None = None
    gradient_mb: float | None = None
    allreduce_mb_per_image: float | None = None  # gradient MB each GPU reduces per image trained
    # GPU telemetry during the timed window (pynvml; empty on CPU)
    sm_clock_mhz_mean: float | None = None
    sm_clock_mhz_min: float | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    temperature_c_max: float | None = None
    throttle_reasons: str = ""
    # what the ranks ran in: the --container image by content (repo@sha256:..., else its local
    # ID; "" on the host, set for every row from the spec), and as the ranks saw it, rank 0's
    # interpreter and every rank's torch version
    container_digest: str = ""
    rank_python: str = ""
    rank_torch: str = ""
    rank_tensorflow: str = ""  # the tf launcher's ranks' TensorFlow
    # cores the ranks' CPU affinity allowed (the fewest of any rank): with --cpu-affinity on,
    # the share each rank was pinned to, else what the launch gave it
    cpu_cores_per_rank: int | None = None


def knob_columns() -> list[tuple[str, Any]]:
    """(name, type) of every knob recorded per row, in declaration order (bench.spec)."""
    columns = []
    for cls in (Variant, Workload):
        hints = typing.get_type_hints(cls)
        columns += [(name, hints[name]) for name, k in knobs(cls) if k.row]
    return columns


def knob_values(workload: Workload, variant: Variant) -> dict[str, Any]:
    """A run's knob columns (see knob_columns)."""
    values = {**dataclasses.asdict(variant), **dataclasses.asdict(workload)}
    return {name: values[name] for name, _ in knob_columns()}


# One run: identity, then every knob, then the measurements. Built from the declarations, so a
# knob added to bench.spec becomes a column here without an edit.
RunRow = dataclasses.make_dataclass(
    "RunRow",
    [(f.name, f.type) for f in dataclasses.fields(RunIdentity)]
    + knob_columns()
    + [(f.name, f.type, f) for f in dataclasses.fields(Measurements)],
    frozen=True,
)
RunRow.__module__ = __name__  # where get_type_hints resolves the column types


@dataclass(frozen=True)
class ProbeRow:
    sweep_id: str
    probe_id: str
    status: str
    error: str
    started_at: str
    gpus: int
    nodes: int
    gpus_per_node: int
    hosts: str
    device: str
    backend: str
    interconnect: str
    nbytes: int
    iterations: int
    time_s: float | None = None  # median time of one allreduce
    algbw_gbps: float | None = None  # GB/s = nbytes / time
    busbw_gbps: float | None = None  # algbw * 2(n-1)/n, as nccl-tests defines it
    # nccl-tests' all_reduce_perf at the same size and GPUs (bench.nccl_tests), where installed
    nccl_tests_busbw_gbps: float | None = None
    nccl_tests: str = ""  # the command that gave it, or why there is none


Row = TypeVar("Row")

_ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
_PANDAS = {str: "string", int: "Int64", float: "float64", bool: "boolean"}


def _base_type(annotation: Any) -> type:
    """`int | None` -> int: the storage type of a column, nullable or not."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0]
    return annotation


def column_types(cls: type[Row]) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    return {f.name: _base_type(hints[f.name]) for f in dataclasses.fields(cls)}


def columns(cls: type[Row]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def arrow_schema(cls: type[Row]) -> pa.Schema:
    return pa.schema([(name, _ARROW[t]) for name, t in column_types(cls).items()])


def to_frame(rows: list[Row], cls: type[Row]) -> pd.DataFrame:
    records = [dataclasses.asdict(r) for r in rows]
    frame = pd.DataFrame.from_records(records, columns=list(columns(cls)))
    return frame.astype({name: _PANDAS[t] for name, t in column_types(cls).items()})


def _cell(value: Any, kind: type) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "" if kind is str else None
    return kind(value)


def from_records(
    records: Iterable[Mapping[str, Any]], cls: type[Row], skipped: list[str] | None = None
) -> list[Row]:
    """Rows from dicts by column name (sweep.jsonl's rows, a frame's rows). A record that is no
    object, or has a cell of the wrong kind, raises ValueError; given `skipped`, it is left out
    and described there instead."""
    kinds, rows = column_types(cls), []
    for number, record in enumerate(records, 1):
        try:
            if not isinstance(record, Mapping):
                raise ValueError(f"not an object: {str(record)[:60]!r}")
            cells = {}
            for name, kind in kinds.items():
                try:
                    cells[name] = _cell(record.get(name), kind)
                except (TypeError, ValueError):
                    said = f"{name} {record.get(name)!r} is not {kind.__name__}"
                    raise ValueError(said) from None
            rows.append(cls(**cells))
        except ValueError as error:
            if skipped is None:
                raise
            skipped.append(f"row {number} left out: {error}")
    return rows


def to_json_records(rows: list[Row]) -> list[dict[str, Any]]:
    """JSON-safe dicts: NaN is not JSON, so missing measurements become null."""
    return [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in record.items()}
        for record in map(dataclasses.asdict, rows)
    ]

"""Rows: one finished launch (its spec, exit status and output) becomes one result row.

A run that produced its measurements becomes an "ok" row; anything else (a rank crashed, ran
out of memory, hung past the timeout, the sweep was interrupted, the launcher is missing)
becomes a row with that status and the key lines of the error, never a row of zeros. A launch of
the per-gpu check is one one-GPU run per GPU: one row each (`row_specs`), from that GPU's own
output, measured or not whatever the other GPUs did.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from bench import stats
from bench.launcher_kinds import TENSORFLOW_PACKAGE, launcher_kind
from bench.launchers import ExecResult
from bench.schema import ProbeRow, RunRow, Status, knob_values
from bench.shared import tf_rules, wire
from bench.shared.telemetry import merge_telemetry
from bench.spec import HostSlots, ProbeSpec, RunSpec, most_slots

OOM_PATTERNS = ("out of memory", "outofmemoryerror", "cublas_status_alloc_failed")
KEY_LINE = re.compile(
    r"(\w+(Error|Exception|Interrupt)\b.*:|^\s*(rank|exitcode|host)\s*:|bench: |Killed|"
    r"[Ss]egmentation fault|SIG(SEGV|ABRT|KILL|BUS)|exit with status|NCCL WARN|[Tt]imed? ?out)"
)
NCCL_TRANSPORT = re.compile(r"via (P2P/\w+|SHM|NET/\w+|COLLNET\w*|NVLS)")
NCCL_INTERFACE = re.compile(r"NET/(?:IB|Socket) : Using (\S+)")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def key_error_lines(output: str, limit: int = 8, width: int = 300) -> list[str]:
    """The lines of a failed launch's output that say what went wrong, each once, last ones kept."""
    seen: dict[str, None] = {}
    for line in output.splitlines():
        text = line.strip()
        if not text or text.startswith("$ ") or wire.MARKER in text:
            continue
        if KEY_LINE.search(text):
            key = text[:width]
            seen.pop(key, None)  # keep the latest position of a repeated line
            seen[key] = None
    return list(seen)[-limit:]


def classify_failure(result: ExecResult) -> Status:
    if result.timed_out:
        return Status.TIMEOUT
    lowered = result.output.lower()
    if any(p in lowered for p in OOM_PATTERNS):
        return Status.OOM
    return Status.FAILED


def parse_nccl_transports(output: str) -> list[str]:
    """NCCL's chosen transports from NCCL_DEBUG=INFO lines ("via P2P/CUMEM", "via NET/IB/0")."""
    return sorted(set(NCCL_TRANSPORT.findall(output)))


def describe_interconnect(
    backend: str, rank_hosts: Sequence[str], output: str, environ: Mapping[str, str] = os.environ
) -> str:
    if len(rank_hosts) < 2:
        return "none (1 rank)"
    multi_host = len(set(rank_hosts)) > 1
    if backend == "gloo" and not multi_host:
        return "loopback (gloo)"
    if backend in ("gloo", "ring"):  # ring: TensorFlow's gRPC ring between a CPU run's workers
        iface = environ.get("GLOO_SOCKET_IFNAME")
        name = "gloo" if backend == "gloo" else "grpc ring"
        return f"tcp ({name}, {iface})" if iface else f"tcp ({name})"
    transports = parse_nccl_transports(output)
    if not transports:
        return "nccl (transport not logged: NCCL_DEBUG is not INFO)"
    described = "+".join(transports)
    interface = NCCL_INTERFACE.search(output)
    return f"nccl {described}" + (f" ({interface[1]})" if interface and multi_host else "")


def measurements(report: wire.RunReport, spec: RunSpec) -> dict[str, Any]:
    """The measurement columns of a row from every rank's timings (per GPU: over the spec's
    GPUs, which a DataParallel process drives several of)."""
    windows = [r.window_s for r in report.ranks]
    window = max(windows)  # every rank must finish its steps
    steps = stats.slowest_rank_steps([r.step_s for r in report.ranks])
    images = report.images_per_rank * report.world_size
    tput = stats.throughput(images, window)
    data_wait = max(r.data_wait_s for r in report.ranks)
    telemetry = merge_telemetry([r.telemetry for r in report.ranks])
    peak_memory = _over_ranks(report, "peak_memory_bytes", max)
    loader_rates = [r.loader_images_per_s for r in report.ranks if r.loader_images_per_s]
    return {
        "images": images,
        "window_s": window,
        "throughput": tput,
        "throughput_per_gpu": tput / spec.world_size,
        "step_time_median_s": stats.percentile(steps, 50),
        "step_time_p90_s": stats.percentile(steps, 90),
        "step_time_cv": statistics.pstdev(steps) / statistics.fmean(steps) if steps else None,
        "timed_steps_run": report.timed_steps,
        "warmup_steps_run": _over_ranks(report, "warmup_steps", max),
        "compile_s": _over_ranks(report, "compile_s", max),
        "rank_imbalance": stats.rank_imbalance(windows),
        "data_wait_s": data_wait,
        "data_wait_fraction": data_wait / window,
        "loader_throughput_per_gpu": min(loader_rates) if loader_rates else None,
        "loader_throughput": sum(loader_rates) if loader_rates else None,
        "peak_memory_gb": peak_memory / 1e9 if peak_memory is not None else None,
        "gradient_mb": report.gradient_bytes / 1e6,
        "allreduce_mb_per_image": allreduce_mb_per_image(spec, report.gradient_bytes),
        **telemetry,  # none of its columns without NVML
        "throttle_reasons": ",".join(telemetry.get("throttle_reasons", [])),
        "rank_python": report.ranks[0].runtime.get("python", ""),
        "rank_torch": _versions(report, "torch"),
        "rank_tensorflow": _versions(report, "tensorflow"),
        "cpu_cores_per_rank": _over_ranks(report, "cpu_cores", min),
    }


def _over_ranks(report: wire.RunReport, field: str, reduce: Callable[[list[Any]], Any]) -> Any:
    """`reduce` of the values of `field` of the ranks that measured it (None when none did)."""
    values = [v for r in report.ranks if (v := getattr(r, field)) is not None]
    return reduce(values) if values else None


def _versions(report: wire.RunReport, framework: str) -> str:
    """The framework's versions the ranks ran, "+"-joined ("" when none ran it)."""
    return "+".join(sorted({r.runtime.get(framework, "") for r in report.ranks} - {""}))


def allreduce_mb_per_image(spec: RunSpec, gradient_bytes: int) -> float:
    """MB of gradients each GPU reduces per image it trains: one allreduce per optimizer step
    (DDP no_sync / Horovod backward_passes_per_step) spreads over its accumulated micro-batches;
    fp16 compression halves it; DataParallel reduces onto GPU 0 after every backward; one GPU,
    or the per-gpu check's GPUs, each alone, reduce nothing."""
    kind = launcher_kind(spec.launcher)
    if spec.world_size == 1 or kind.independent:
        return 0.0
    compressed = spec.workload.fp16_allreduce and kind.fp16_allreduce
    wire_bytes = gradient_bytes / 2 if compressed else gradient_bytes
    accumulated = spec.variant.grad_accum if kind.exchange_per_step else 1
    return wire_bytes / (spec.batch_per_gpu * accumulated) / 1e6


def collective_backend(device: str) -> str:
    """torch.distributed's backend for the device (bench.rank.engines picks the same)."""
    return "nccl" if device == "cuda" else "gloo"


def expected_backend(spec: RunSpec) -> str:
    """The backend column of a run that reported none (it failed or did not launch)."""
    kind, device = launcher_kind(spec.launcher), spec.workload.device
    if kind.framework == TENSORFLOW_PACKAGE:
        return tf_rules.backend(device == "cuda", spec.nodes, spec.gpus_per_node)
    if kind.independent or (not kind.process_per_gpu and device != "cuda"):
        return "none"  # per-gpu, DataParallel on CPU: nothing to communicate
    return collective_backend(device)


def run_interconnect(spec: RunSpec, report: wire.RunReport, result: ExecResult) -> str:
    """The interconnect column: what NCCL, gloo or TensorFlow's ring used between the GPUs (or
    CPU processes), or the in-process copies of one process driving them (DataParallel;
    TensorFlow's ReductionToOneDevice on CPU)."""
    kind, gpus = launcher_kind(spec.launcher), spec.world_size
    if kind.process_per_gpu:
        hosts = [r.host for r in report.ranks]
    elif kind.framework == TENSORFLOW_PACKAGE and report.backend in ("nccl", "ring"):
        hosts = [h.host for h in spec.placement for _ in range(h.slots)]  # one per replica
    elif gpus > 1:
        devices = "CPU devices" if report.backend == "one-device" else "GPUs"
        return f"in-process ({kind.title} over {gpus} {devices})"
    else:
        return "none (1 GPU)" if spec.workload.device == "cuda" else "none (1 process)"
    return describe_interconnect(report.backend, hosts, result.output, result.environ or os.environ)


def _columns_of_the_spec() -> tuple[str, ...]:
    """The run row's columns that are an attribute of the same name and meaning on RunSpec."""
    spec = {f.name for f in dataclasses.fields(RunSpec)}
    spec |= {n for n in dir(RunSpec) if isinstance(getattr(RunSpec, n, None), property)}
    return tuple(f.name for f in dataclasses.fields(RunRow) if f.name in spec - {"variant"})


SPEC_COLUMNS = _columns_of_the_spec()


def _identity(spec: RunSpec) -> dict[str, Any]:
    """The columns a run's row takes from its spec: identity, placement, shape, every knob."""
    return {
        **{name: getattr(spec, name) for name in SPEC_COLUMNS},
        "variant": spec.variant.label,
        "gpus": spec.world_size,
        **knob_values(spec.workload, spec.variant),
    }


@functools.lru_cache(maxsize=4)
def reported(run_id: str, output: str) -> wire.RunReport | None:
    """Rank 0's report for `run_id` in a launch's output (None: it wrote none), decoded once:
    the row, the per-gpu slot check and the profile all read the same launch's report."""
    data = wire.decode(run_id, output)
    return None if data is None else wire.RunReport.from_dict(data)


def run_row(
    spec: RunSpec, result: ExecResult, started_at: str, timeout_s: float | None = None
) -> RunRow:
    """The row for a launch that ran to completion, failed, or timed out (after `timeout_s`:
    the wall time also counts stopping the processes, so it is not the timeout)."""
    report = reported(spec.run_id, result.output)
    if result.returncode == 0 and not result.timed_out and report is not None:
        names = sorted({r.device_name for r in report.ranks})
        return dataclasses.replace(
            not_measured_row(spec, Status.OK, "", started_at, result.wall_s, result.hosts),
            device_name="+".join(names),
            backend=report.backend,
            interconnect=run_interconnect(spec, report, result),
            **measurements(report, spec),
        )
    if result.returncode == 0 and not result.timed_out:
        status, lines = Status.FAILED, ["launcher exited 0 but rank 0 reported no result"]
    else:
        status, lines = classify_failure(result), key_error_lines(result.output)
        if result.timed_out:
            limit = f"{timeout_s:g} s" if timeout_s is not None else "its"
            lines.append(f"killed after the {limit} timeout ({result.wall_s:.1f} s in all)")
        else:
            lines.append(f"launcher exit status {result.returncode}")
    return not_measured_row(
        spec, status, "\n".join(lines), started_at, result.wall_s, hosts=result.hosts
    )


def row_specs(spec: RunSpec, ran_on: str = "") -> list[tuple[RunSpec, int | None]]:
    """The rows a launch records, each as (the spec it is the row of, its GPU index): the
    launch itself, or under the per-gpu launcher a one-GPU run per GPU of the placement, slot
    by slot (bench.shared.wire.result_id), on its node (`ran_on`: the hosts the launch ran on,
    ExecResult.hosts, when they are not the planned ones: Slurm's)."""
    if not launcher_kind(spec.launcher).independent:
        return [(spec, None)]
    hosts = [h.rsplit(":", 1)[0] for h in ran_on.split(",")] if ran_on else []
    rows: list[tuple[RunSpec, int | None]] = []
    for index, node in enumerate(spec.placement):
        host = hosts[index] if index < len(hosts) else node.host
        for gpu in range(node.slots):
            one_gpu = dataclasses.replace(
                spec,
                run_id=wire.result_id(spec.run_id, len(rows)),
                placement=(HostSlots(host, 1),),
            )
            rows.append((one_gpu, gpu))
    return rows


def run_rows(
    spec: RunSpec, result: ExecResult, started_at: str, timeout_s: float | None = None
) -> list[RunRow]:
    """A finished launch's rows (see `row_specs`): a GPU of the per-gpu check that reported
    is measured; one that did not is failed with its own output's key lines (the launch's
    where it wrote none)."""
    rows = []
    for slot, (one, gpu) in enumerate(row_specs(spec, result.hosts)):
        if gpu is None:
            return [run_row(spec, result, started_at, timeout_s)]
        output = wire.slot_output(result.output, slot)
        wrote = reported(one.run_id, output) is not None
        own = dataclasses.replace(
            result,
            output=output if output.strip() else result.output,
            returncode=0 if wrote else result.returncode,
            timed_out=result.timed_out and not wrote,
            hosts="",
        )
        rows.append(dataclasses.replace(run_row(one, own, started_at, timeout_s), gpu_index=gpu))
    return rows


def not_measured_rows(spec: RunSpec, status: Status, error: str, started_at: str) -> list[RunRow]:
    """`not_measured_row` for each row the launch would have recorded (see `row_specs`)."""
    return [
        dataclasses.replace(not_measured_row(one, status, error, started_at), gpu_index=gpu)
        for one, gpu in row_specs(spec)
    ]


def not_measured_row(
    spec: RunSpec,
    status: Status,
    error: str,
    started_at: str,
    wall_s: float | None = None,
    hosts: str = "",
) -> RunRow:
    """A row for a run with no measurements: failed, interrupted or unavailable. hosts: where
    it actually ran, when that differs from the plan (Slurm picks the nodes)."""
    return RunRow(
        **{**_identity(spec), **({"hosts": hosts} if hosts else {})},
        status=status.value,
        error=error,
        started_at=started_at,
        launch_wall_s=wall_s,
        device_name="",
        backend=expected_backend(spec),
        interconnect="",
    )


def profile_of(spec: RunSpec, result: ExecResult) -> dict[str, Any] | None:
    """--profile: rank 0's trace summary of a finished run, with where its trace was written
    (the host of rank 0: on another node the file stays there)."""
    if not spec.trace_path or result.returncode != 0 or result.timed_out:
        return None
    report = reported(spec.run_id, result.output)
    if report is None:
        return None
    first = report.ranks[0]
    if first.profile is None:
        return None
    return {"run_id": spec.run_id, "host": first.host, **first.profile}


def probe_row(spec: ProbeSpec, result: ExecResult, started_at: str) -> ProbeRow:
    base: dict[str, Any] = {
        "sweep_id": spec.sweep_id,
        "probe_id": spec.probe_id,
        "started_at": started_at,
        "gpus": spec.world_size,
        "nodes": len(spec.placement),
        "gpus_per_node": most_slots(spec.placement),
        "hosts": spec.hosts,
        "device": spec.device,
        "iterations": spec.iterations,
    }
    data = wire.decode(spec.probe_id, result.output)
    if result.returncode != 0 or result.timed_out or data is None:
        lines = key_error_lines(result.output) or [f"launcher exit status {result.returncode}"]
        return ProbeRow(
            **base,
            status=classify_failure(result).value,
            error="\n".join(lines),
            backend=collective_backend(spec.device),
            interconnect="",
            nbytes=spec.nbytes,
        )
    alg = data["nbytes"] / data["time_s"]  # bytes per second: nccl-tests' algbw
    hosts = [h.host for h in spec.placement for _ in range(h.slots)]
    return ProbeRow(
        **base,
        status=Status.OK.value,
        error="",
        backend=data["backend"],
        interconnect=describe_interconnect(
            data["backend"], hosts, result.output, result.environ or os.environ
        ),
        nbytes=data["nbytes"],
        time_s=data["time_s"],
        algbw_gbps=alg / 1e9,
        busbw_gbps=stats.busbw(alg, spec.world_size) / 1e9,
    )

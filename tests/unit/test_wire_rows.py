"""Rank 0's report on the wire, and turning a launch's outcome into a row."""

from __future__ import annotations

import dataclasses
import json

import pytest
from bench_builders import config_for, cpu_machine

from bench import rows
from bench.launchers import ExecResult
from bench.plan import local_placement, plan_sweep
from bench.schema import Status
from bench.shared import wire
from bench.spec import ProbeSpec


def rank(rank: int, window: float, steps: list[float], wait: float = 0.01) -> wire.RankReport:
    return wire.RankReport(
        rank=rank,
        local_rank=rank,
        host="vm",
        device_name="cpu",
        window_s=window,
        step_s=steps,
        data_wait_s=wait,
        peak_memory_bytes=2_000_000_000 + rank,
    )


REPORT = wire.RunReport(
    run_id="ddp-n2-fp32-nchw-r0",
    backend="gloo",
    world_size=2,
    gradient_bytes=102_228_128,
    images_per_rank=24,  # batch 8 x 3 timed steps
    ranks=[rank(0, 2.0, [0.5, 0.5, 1.0], 0.02), rank(1, 2.5, [0.6, 0.4, 1.5], 0.05)],
)


def test_wire_round_trip_through_noisy_prefixed_output() -> None:
    lines = wire.encode(REPORT.run_id, dataclasses.asdict(REPORT), chunk_chars=64)
    assert len(lines) > 3
    noisy = ["[W socket.cpp:1] warning", *(f"[1,0]<stdout>:{line}" for line in lines), "bye"]
    noisy.insert(2, "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC")
    assert wire.decode(REPORT.run_id, "\n".join(noisy)) == json.loads(
        json.dumps(dataclasses.asdict(REPORT))
    )
    assert wire.RunReport.from_dict(wire.decode(REPORT.run_id, "\n".join(noisy))) == REPORT


def test_wire_detects_missing_chunks_and_other_runs() -> None:
    lines = wire.encode(REPORT.run_id, dataclasses.asdict(REPORT), chunk_chars=64)
    assert wire.decode(REPORT.run_id, "\n".join(lines[:-1])) is None
    assert wire.decode("another-run", "\n".join(lines)) is None
    assert wire.decode(REPORT.run_id, "no result here") is None


def test_send_prints_every_ranks_report_from_the_first_rank_only(
    capfd: pytest.CaptureFixture[str],
) -> None:
    ranks = REPORT.ranks
    # the ranks' all-gather, through JSON as TensorFlow's (bench.rank.keras_worker.Ranks)
    gathered = [json.loads(json.dumps(dataclasses.asdict(r))) for r in ranks]
    seen = []

    def gather(mine: object) -> list[object]:
        seen.append(mine)
        return gathered

    run = dataclasses.replace(REPORT, ranks=[])  # what each rank builds
    wire.send(gather, ranks[1], run, first=False)
    assert capfd.readouterr().out == ""
    wire.send(gather, ranks[0], run, first=True, slot=3)
    out = capfd.readouterr().out
    assert seen == [dataclasses.asdict(ranks[1]), dataclasses.asdict(ranks[0])]
    assert wire.decode(REPORT.run_id, out) is None  # a per-gpu rank's result is its slot's
    assert wire.RunReport.from_dict(wire.decode(wire.result_id(REPORT.run_id, 3), out)) == REPORT


def test_wire_lines_stay_below_pipe_buf() -> None:
    big = {"steps": [0.123456789] * 20_000}
    assert all(len(line) + 1 < 4096 for line in wire.encode("r", big))


def test_measurements_from_every_rank() -> None:
    m = rows.measurements(REPORT, spec_for_two_ranks())
    assert m["images"] == 48
    assert m["window_s"] == 2.5  # the slowest rank
    assert m["throughput"] == pytest.approx(48 / 2.5)
    assert m["throughput_per_gpu"] == pytest.approx(48 / 2.5 / 2)
    # per step the slowest rank: [0.6, 0.5, 1.5] -> median 0.6
    assert m["step_time_median_s"] == pytest.approx(0.6)
    assert m["rank_imbalance"] == pytest.approx(0.25)
    assert m["data_wait_s"] == 0.05 and m["data_wait_fraction"] == pytest.approx(0.02)
    assert m["peak_memory_gb"] == pytest.approx(2.000000001)
    assert m["gradient_mb"] == pytest.approx(102.228128)
    assert m["allreduce_mb_per_image"] == pytest.approx(102.228128 / 8)  # batch 8, no accumulation
    assert m.get("sm_clock_mhz_mean") is None and m["throttle_reasons"] == ""  # no NVML


def test_allreduce_per_image_follows_accumulation_compression_and_launcher() -> None:
    def spec(*argv: str):  # type: ignore[no-untyped-def]
        config = config_for(["--gpus", "1,2", *argv], cpu_machine())
        return plan_sweep(config, "s", local_placement(2), 2)

    grads = 100_000_000
    one, two = spec("--launchers", "ddp", "--grad-accum", "4")[:2]
    assert rows.allreduce_mb_per_image(one, grads) == 0.0  # one GPU reduces nothing
    assert rows.allreduce_mb_per_image(two, grads) == pytest.approx(100 / (8 * 4))
    assert two.global_batch == 8 * 2 * 4  # images per optimizer step
    fp16 = spec("--launchers", "horovod", "--fp16-allreduce")[1]
    assert rows.allreduce_mb_per_image(fp16, grads) == pytest.approx(50 / 8)
    # DataParallel sums every backward's gradients onto GPU 0: accumulation does not spread it
    dp = spec("--launchers", "dp", "--grad-accum", "4")[1]
    assert rows.allreduce_mb_per_image(dp, grads) == pytest.approx(100 / 8)


def test_tf_rows_describe_how_its_replicas_reduce() -> None:
    argv = ["--gpus", "1,2", "--launchers", "tf", "--image-size", "64", "--repeats", "1"]
    config = config_for(argv, cpu_machine())
    one, two = plan_sweep(config, "s", local_placement(2), 2)
    # a run that reported nothing: the backend tf_rules.backend says keras_worker picks
    assert rows.expected_backend(one) == "none" and rows.expected_backend(two) == "one-device"
    report = wire.RunReport(
        run_id=two.run_id,
        backend="one-device",  # MirroredStrategy over two CPU devices of one process
        world_size=1,
        gradient_bytes=10,
        images_per_rank=48,
        ranks=[
            dataclasses.replace(
                rank(0, 2.0, [0.5, 0.5, 1.0]), runtime={"tensorflow": "2.21.0", "keras": "3.15.1"}
            )
        ],
    )
    output = "\n".join(wire.encode(two.run_id, dataclasses.asdict(report)))
    row = rows.run_row(two, result(0, output), "t0")
    assert row.interconnect == "in-process (TensorFlow over 2 CPU devices)"
    assert (row.rank_tensorflow, row.rank_torch) == ("2.21.0", "")
    assert row.throughput_per_gpu == pytest.approx(12)
    # across nodes: TensorFlow's gRPC ring on CPU, on the interface the workers' addresses use
    ring = rows.describe_interconnect("ring", ["a", "b"], "", {"GLOO_SOCKET_IFNAME": "eth0"})
    assert ring == "tcp (grpc ring, eth0)"


def test_dataparallel_row_counts_the_gpus_its_one_process_drives() -> None:
    config = config_for(["--gpus", "1,2", "--launchers", "dp"], cpu_machine())
    dp = plan_sweep(config, "s", local_placement(2), 2)[1]
    report = wire.RunReport(  # one process reporting for both GPUs' images
        run_id=dp.run_id,
        backend="nccl",
        world_size=1,
        gradient_bytes=10,
        images_per_rank=48,
        ranks=[rank(0, 2.0, [0.5, 0.5, 1.0])],
    )
    m = rows.measurements(report, dp)
    assert m["throughput"] == pytest.approx(24.0) and m["throughput_per_gpu"] == pytest.approx(12)
    output = "\n".join(wire.encode(dp.run_id, dataclasses.asdict(report)))
    row = rows.run_row(dp, result(0, output), "t0")
    assert row.interconnect == "in-process (DataParallel over 2 GPUs)" and row.gpus == 2


TORCHRUN_FAILURE = """\
$ python -m torch.distributed.run --nnodes=1 ...
W1121 23:50:01.000000 123 torch/distributed/run.py:800] Setting OMP_NUM_THREADS
bench: injecting fault 'exit' (BENCH_INJECT_FAULT)
[rank0]: Traceback (most recent call last):
[rank0]:   File "bench/worker.py", line 10, in main
[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer
W1121 23:50:02.000000 123 api.py:900] Sending process 456 closing signal SIGTERM
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
bench.worker FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_23:50:02
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 457)
  error_file: <N/A>
============================================================
"""


def test_key_error_lines_pick_what_went_wrong() -> None:
    lines = rows.key_error_lines(TORCHRUN_FAILURE)
    assert "bench: injecting fault 'exit' (BENCH_INJECT_FAULT)" in lines
    assert any("RuntimeError:" in line and "Connection closed by peer" in line for line in lines)
    assert "rank      : 1 (local_rank: 1)" in lines
    assert "exitcode  : 3 (pid: 457)" in lines
    assert not any("Setting OMP_NUM_THREADS" in line or line.startswith("$") for line in lines)
    assert len(rows.key_error_lines(TORCHRUN_FAILURE * 3)) == len(lines)  # each once
    assert len(rows.key_error_lines(TORCHRUN_FAILURE, limit=2)) == 2


def result(code: int | None, output: str, timed_out: bool = False) -> ExecResult:
    return ExecResult(code, timed_out, 12.5, output)


def test_failure_classes() -> None:
    assert rows.classify_failure(result(None, "", timed_out=True)) == Status.TIMEOUT
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert rows.classify_failure(result(1, oom)) == Status.OOM
    assert rows.classify_failure(result(1, TORCHRUN_FAILURE)) == Status.FAILED


NCCL_LOG = """\
gpu1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>
gpu1:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu1:100:200 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu1:100:200 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0
"""


def test_interconnect_description() -> None:
    assert rows.parse_nccl_transports(NCCL_LOG) == ["NET/IB", "P2P/CUMEM"]
    assert rows.describe_interconnect("gloo", ["vm"], "") == "none (1 rank)"
    assert rows.describe_interconnect("gloo", ["vm", "vm"], "") == "loopback (gloo)"
    env = {"GLOO_SOCKET_IFNAME": "veth1"}
    assert rows.describe_interconnect("gloo", ["a", "b"], "", env) == "tcp (gloo, veth1)"
    assert rows.describe_interconnect("nccl", ["a", "a"], NCCL_LOG) == "nccl NET/IB+P2P/CUMEM"
    assert (
        rows.describe_interconnect("nccl", ["a", "b"], NCCL_LOG)
        == "nccl NET/IB+P2P/CUMEM ([0]mlx5_0:1/IB)"
    )
    assert "not logged" in rows.describe_interconnect("nccl", ["a", "a"], "")


def spec_for_two_ranks():  # type: ignore[no-untyped-def]
    config = config_for(["--gpus", "1,2", "--launchers", "ddp"], cpu_machine())
    return plan_sweep(config, "s", local_placement(2), 2)[1]


def test_ok_row_from_a_finished_launch() -> None:
    spec = spec_for_two_ranks()
    report = {**dataclasses.asdict(REPORT), "run_id": spec.run_id}
    output = "\n".join(["starting", *wire.encode(spec.run_id, report), "done"])
    row = rows.run_row(spec, result(0, output), "t0")
    assert row.status == "ok" and row.error == ""
    assert row.throughput == pytest.approx(19.2)
    assert (row.gpus, row.nodes, row.gpus_per_node, row.hosts) == (2, 1, 2, "localhost:2")
    assert (row.backend, row.interconnect, row.device_name) == ("gloo", "loopback (gloo)", "cpu")
    assert (row.launch_wall_s, row.started_at, row.threads_per_rank) == (12.5, "t0", 1)
    assert (row.global_batch, row.precision, row.channels_last) == (16, "fp32", False)


def test_rows_for_launches_that_did_not_report() -> None:
    spec = spec_for_two_ranks()
    crashed = rows.run_row(spec, result(1, TORCHRUN_FAILURE), "t0")
    assert crashed.status == "failed" and crashed.throughput is None and crashed.images is None
    assert "exitcode  : 3 (pid: 457)" in crashed.error
    assert crashed.error.endswith("launcher exit status 1")
    silent = rows.run_row(spec, result(0, "nothing"), "t0")
    assert silent.status == "failed" and "reported no result" in silent.error
    hung = rows.run_row(spec, result(None, "", timed_out=True), "t0")
    assert hung.status == "timeout" and "timeout" in hung.error
    missing = rows.not_measured_row(spec, Status.UNAVAILABLE, "no horovodrun", "t0")
    assert (missing.status, missing.error, missing.backend) == (
        "unavailable",
        "no horovodrun",
        "gloo",
    )


def test_probe_row_bandwidths() -> None:
    spec = ProbeSpec("s", "allreduce-n4", local_placement(4), 100_000_000, 5, "cpu", 1)
    payload = {"backend": "gloo", "world_size": 4, "time_s": 0.1, "nbytes": 100_000_000}
    row = rows.probe_row(spec, result(0, "\n".join(wire.encode(spec.probe_id, payload))), "t")
    assert row.status == "ok"
    assert row.algbw_gbps == pytest.approx(1.0)  # 100 MB / 0.1 s
    assert row.busbw_gbps == pytest.approx(1.5)  # x 2 * 3 / 4
    assert row.interconnect == "loopback (gloo)"
    failed = rows.probe_row(spec, result(1, "RuntimeError: gloo failed"), "t")
    assert failed.status == "failed" and failed.algbw_gbps is None

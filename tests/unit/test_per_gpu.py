"""The per-gpu check: its verdict (median, threshold, published figure, ties, one GPU, a failed
GPU), its fleet table, one row per GPU from one launch, and the launch itself: the plan, the
command line on this machine and across nodes, and the node spawner run for real."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine, run_row

from bench.admission import check_values
from bench.hosts import ClusterConfig
from bench.launcher_kinds import PER_GPU, launcher_kind
from bench.launchers import ExecResult, launch_of
from bench.launchers.argv import Tools
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.local import LocalLauncher
from bench.machine import NodeInfo
from bench.plan import local_placement, plan_probes, plan_sweep
from bench.rank import faults
from bench.report.per_gpu import (
    FLEET_HEADER,
    fleet_table,
    judge,
    per_gpu_section,
    threshold_of,
    verdicts,
)
from bench.rows import not_measured_rows, row_specs, run_rows
from bench.schema import RunRow, Status
from bench.shared import wire
from bench.spec import HostSlots

H100 = "NVIDIA H100 80GB HBM3"  # as torch.cuda.get_device_name names it
SPAWNER = (sys.executable, "-m", "bench.launchers.per_gpu")
LAMBDA_H100_AMP = 2791.0  # bench/reference.py: Lambda results_v2, H100 SXM, amp, 1 GPU


def gpu(node: str, index: int, throughput: float | None, **overrides: object) -> RunRow:
    """A per-GPU row as bench.rows writes it: its node with one slot, its GPU index."""
    status = Status.OK.value if throughput is not None else Status.FAILED.value
    return run_row(
        run_id=f"per-gpu-n8-fp32-nchw-r0.gpu{index}",
        launcher=PER_GPU.name,
        hosts=f"{node}:1",
        gpu_index=index,
        throughput=throughput,
        throughput_per_gpu=throughput,
        status=status,
        **overrides,
    )


# ---- the verdict


@pytest.mark.parametrize(
    ("throughput", "median", "published", "expected"),
    [
        (100.0, 100.0, None, "ok"),
        (90.0, 100.0, None, "ok"),  # exactly 10 % below: not more than the threshold
        (89.9, 100.0, None, "SLOW vs node median"),
        (95.0, 100.0, 120.0, "SLOW vs published"),
        (80.0, 100.0, 100.0, "SLOW vs node median and published"),
        (150.0, 100.0, 100.0, "ok"),  # faster than both is no fault
        (50.0, None, None, "ok"),  # nothing to compare with
    ],
)
def test_judge_flags_more_than_the_threshold_below_either_reference(
    throughput: float, median: float | None, published: float | None, expected: str
) -> None:
    assert judge(throughput, median, published, 10.0) == expected


def test_judge_names_a_run_that_did_not_finish_by_its_status() -> None:
    assert judge(None, 100.0, 100.0, 10.0) == "FAILED"
    assert judge(None, 100.0, None, 10.0, Status.OOM.value) == "OOM"
    assert judge(89.0, 100.0, None, 20.0) == "ok"  # the threshold is the knob's value


def test_the_slow_gpu_is_flagged_against_its_nodes_median_slowest_first() -> None:
    rows = [gpu("a", i, 100.0 + i) for i in range(7)] + [gpu("a", 7, 80.0)]
    table = verdicts(rows, 10.0)
    assert [(v.gpu_index, v.verdict) for v in table[:2]] == [(7, "SLOW vs node median"), (0, "ok")]
    assert [v.throughput for v in table] == sorted(v.throughput for v in table)  # type: ignore[type-var]
    assert table[0].node_median == pytest.approx(102.5)  # median of 80, 100, ..., 106
    assert table[0].vs_node_median == pytest.approx(80 / 102.5 - 1)
    assert [v.verdict for v in table[1:]] == ["ok"] * 7


def test_each_node_has_its_own_median_and_one_gpu_is_its_own() -> None:
    rows = [gpu("a", 0, 100.0), gpu("a", 1, 100.0), gpu("b", 0, 50.0)]
    table = {(v.node, v.gpu_index): v for v in verdicts(rows, 10.0)}
    assert table[("b", 0)].node_median == 50.0 and table[("b", 0)].verdict == "ok"
    assert table[("a", 1)].vs_node_median == 0.0


def test_ties_are_ordered_by_node_then_gpu() -> None:
    rows = [gpu("b", 1, 100.0), gpu("a", 1, 100.0), gpu("b", 0, 100.0), gpu("a", 0, 100.0)]
    order = [(v.node, v.gpu_index) for v in verdicts(rows, 10.0)]
    assert order == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert all(v.verdict == "ok" for v in verdicts(rows, 10.0))


def test_a_failed_gpu_comes_first_and_stays_out_of_the_median() -> None:
    failed = gpu("a", 2, None, error="bench: GPU 2 exited with status 3")
    rows = [gpu("a", 0, 100.0), gpu("a", 1, 96.0), failed]
    table = verdicts(rows, 10.0)
    assert (table[0].gpu_index, table[0].verdict) == (2, "FAILED")
    assert table[0].error == "bench: GPU 2 exited with status 3"
    assert table[0].vs_node_median is None and table[0].throughput is None
    assert table[1].node_median == pytest.approx(98.0)  # of 100 and 96 only


def test_medians_are_per_launch() -> None:
    rows = [gpu("a", 0, 100.0), gpu("a", 1, 100.0)]
    rows += [gpu("a", 0, 50.0, repeat=1), gpu("a", 1, 50.0, repeat=1)]
    assert all(v.verdict == "ok" for v in verdicts(rows, 10.0))


def test_published_figure_for_resnet50_at_224_on_a_known_gpu() -> None:
    on_h100 = {"device_name": H100, "model": "resnet50", "image_size": 224}
    rows = [
        gpu("a", 0, 2800.0, precision="amp-bf16", **on_h100),
        gpu("a", 1, 2400.0, precision="amp-bf16", **on_h100, throttle_reasons="hw_slowdown"),
    ]
    table = verdicts(rows, 10.0)
    assert table[0].published == LAMBDA_H100_AMP
    assert table[0].published_source == "Lambda deeplearning-benchmark"
    assert table[0].vs_published == pytest.approx(2400 / LAMBDA_H100_AMP - 1)
    assert table[0].verdict == "SLOW vs published"  # 14 % below; 7.7 % below the median
    assert table[0].throttle_reasons == "hw_slowdown"  # the telemetry that may say why
    assert table[1].verdict == "ok"
    small = [gpu("a", 0, 100.0, precision="amp-bf16", device_name=H100, image_size=32)]
    assert verdicts(small, 10.0)[0].published is None  # not the workload the figures measured
    assert verdicts([gpu("a", 0, 100.0)], 10.0)[0].published is None  # "cpu"


def test_only_per_gpu_rows_make_the_table() -> None:
    assert verdicts([run_row(), run_row(run_id="ddp-n2", gpus=2)], 10.0) == []


def test_the_fleet_table_and_section() -> None:
    table = verdicts(
        [gpu("n1", 0, 100.0), gpu("n2", 3, 50.0), gpu("n2", 1, None, device_name="")], 10.0
    )
    lines = fleet_table(table)
    assert lines[0] == "| " + " | ".join(FLEET_HEADER) + " |"
    assert lines[2:] == [
        "| n2 | 1 | ? | n/a | n/a | n/a | **FAILED** |",
        "| n2 | 3 | cpu | 50.0 | 0.0 % | n/a | ok |",
        "| n1 | 0 | cpu | 100.0 | 0.0 % | n/a | ok |",
    ]
    section = per_gpu_section(table, 10.0)
    assert section[0] == "**1 of 3 GPU runs flagged:** n2 GPU 1 (FAILED)."
    assert per_gpu_section(table[1:], 10.0)[0] == "All 2 GPU runs within 10 %."


# ---- the knob


def test_the_threshold_is_one_knob_with_a_default_of_10_percent() -> None:
    assert config_for([], cpu_machine()).slow_gpu_threshold == 10.0
    assert config_for(["--slow-gpu-threshold", "5"], cpu_machine()).slow_gpu_threshold == 5.0
    assert check_values({"slow_gpu_threshold": -1.0}) == [
        "--slow-gpu-threshold must be >= 0, got -1"
    ]
    assert threshold_of({}) == 10.0  # a sweep saved before the knob existed
    assert threshold_of({"slow_gpu_threshold": 3}) == 3.0


# ---- planning and rows


def test_the_check_runs_once_on_every_gpu_and_probes_nothing() -> None:
    config = config_for(["--launchers", "per-gpu,ddp", "--repeats", "1"], gpu_machine(gpus=4))
    specs = plan_sweep(config, "s", local_placement(4), 32)
    per_gpu = [s for s in specs if s.launcher == PER_GPU.name]
    assert [s.world_size for s in per_gpu] == [4]  # not 1, 2, 4: every GPU at once
    assert sorted(s.world_size for s in specs if s not in per_gpu) == [1, 2, 4]
    alone = config_for(["--launchers", "per-gpu"], gpu_machine(gpus=4))
    assert plan_probes(alone, "s", local_placement(4), 32) == []
    assert launcher_kind("per-gpu").independent and not launcher_kind("ddp").independent


def _fleet_spec():  # type: ignore[no-untyped-def]
    config = config_for(
        ["--hosts", "n1:2,n2:2", "--launchers", "per-gpu", "--repeats", "1"], gpu_machine()
    )
    (spec,) = plan_sweep(config, "s", (), 32)
    return spec


def test_one_row_per_gpu_of_the_fleet_each_from_its_own_output() -> None:
    spec = _fleet_spec()
    assert [(one.run_id, one.hosts, i) for one, i in row_specs(spec)] == [
        (f"{spec.run_id}.gpu0", "n1:1", 0),
        (f"{spec.run_id}.gpu1", "n1:1", 1),
        (f"{spec.run_id}.gpu2", "n2:1", 0),
        (f"{spec.run_id}.gpu3", "n2:1", 1),
    ]
    lines = []
    for slot in (0, 1, 3):  # slot 2's rank crashed
        report = wire.RunReport(
            spec.run_id, "none", 1, 1000, 64, [_rank_report(window_s=1.0 + slot)], 8
        )
        lines += [
            wire.slot_prefix(slot) + x
            for x in wire.encode(f"{spec.run_id}.gpu{slot}", dataclasses.asdict(report))
        ]
    lines.append(wire.slot_prefix(2) + "RuntimeError: slot 2 failed (a test line)")
    lines.append(wire.slot_prefix(2) + "bench: GPU 0 exited with status 1")
    result = ExecResult(1, False, 30.0, "\n".join(lines) + "\n", hosts="n1:2,n2:2")
    rows = run_rows(spec, result, "t0", 600)
    assert [(r.hosts, r.gpu_index, r.status) for r in rows] == [
        ("n1:1", 0, "ok"),
        ("n1:1", 1, "ok"),
        ("n2:1", 0, "failed"),
        ("n2:1", 1, "ok"),
    ]
    assert rows[1].throughput == pytest.approx(64 / 2.0) and rows[1].gpus == 1
    assert rows[0].backend == "none" and rows[0].allreduce_mb_per_image == 0.0
    assert "slot 2 failed" in rows[2].error and "exited with status 1" in rows[2].error
    assert rows[3].error == ""
    table = verdicts(rows, 10.0)
    assert [(v.node, v.gpu_index, v.verdict) for v in table] == [
        ("n2", 0, "FAILED"),
        ("n2", 1, "ok"),  # 16 img/s, alone on its node: its own median
        ("n1", 1, "SLOW vs node median"),  # 32 img/s against n1's median of 32 and 64
        ("n1", 0, "ok"),
    ]


# a line the multi-node backend adds for a node that failed (bench.launchers.multinode)
LOST = "bench: c9: exited with rc=1: RuntimeError: the node's process failed (a test line)\n"


def test_under_slurm_the_rows_name_the_nodes_the_launch_ran_on() -> None:
    spec = _fleet_spec()
    result = ExecResult(1, False, 1.0, LOST, hosts="c7:2,c9:2")
    rows = run_rows(spec, result, "t0", 600)
    assert [r.hosts for r in rows] == ["c7:1", "c7:1", "c9:1", "c9:1"]
    assert all(r.status == "failed" and LOST.strip() in r.error for r in rows)  # the launch's


def test_a_launch_that_did_not_run_is_a_row_per_gpu() -> None:
    rows = not_measured_rows(_fleet_spec(), Status.INTERRUPTED, "sweep interrupted", "t0")
    assert [(r.hosts, r.gpu_index, r.status) for r in rows] == [
        (host, i, "interrupted") for host in ("n1:1", "n2:1") for i in range(2)
    ]


def _rank_report(window_s: float) -> wire.RankReport:
    return wire.RankReport(0, 0, "host", "cpu", window_s, [window_s / 8] * 8, 0.0, None)


# ---- the command lines


def test_this_machine_starts_one_spawner_for_its_gpus() -> None:
    config = config_for(["--gpus", "4", "--launchers", "per-gpu"], gpu_machine())
    spec = plan_sweep(config, "s", local_placement(4), 32)[0]
    tools = Tools(python="/venv/bin/python", horovodrun="/venv/bin/horovodrun")
    argv = LocalLauncher(tools).command(launch_of(spec)).argv
    assert argv[:8] == (
        "/venv/bin/python",
        "-m",
        "bench.launchers.per_gpu",
        "--gpus",
        "4",
        "--first-slot",
        "0",
        "--",
    )
    assert argv[8:11] == ("/venv/bin/python", "-m", "bench.rank.worker")


def test_each_node_numbers_its_gpus_after_the_nodes_before_it() -> None:
    cluster = ClusterConfig(
        hosts=(("n1", 2), ("n2", 3)),
        node_counts=(2,),
        gpus_per_node=(2,),
        remote_python="/env/bin/python",
        remote_workdir="/srv/bench",
    )
    nodes = ClusterLauncher(cluster, environ={})
    nodes.infos = {h: NodeInfo(h, h, "3.11", address=h, interface="eth0") for h in ("n1", "n2")}
    launch = dataclasses.replace(
        launch_of(_fleet_spec()), placement=(HostSlots("n1", 2), HostSlots("n2", 3))
    )
    commands = nodes.commands(launch, "gsb-x")
    assert [(c.host, c.argv[3:7]) for c in commands] == [
        ("n1", ("--gpus", "2", "--first-slot", "0")),
        ("n2", ("--gpus", "3", "--first-slot", "2")),
    ]
    assert all("torch.distributed.run" not in c.argv for c in commands)  # no rendezvous


# ---- the spawner, for real


def test_the_spawner_runs_every_gpu_alone_and_a_failure_stops_no_other() -> None:
    child = (
        "import os, sys, time; slot = int(os.environ['BENCH_GPU_SLOT']); "
        "time.sleep(0.5 if slot == 5 else 0); "
        "e = os.environ; print(e['LOCAL_RANK'], e['LOCAL_WORLD_SIZE'], e['RANK'], "
        "e['WORLD_SIZE'], slot); "
        "sys.exit(3 if slot == 4 else 0)"
    )
    done = subprocess.run(
        [*SPAWNER, "--gpus", "3", "--first-slot", "3", "--", sys.executable, "-c", child],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3  # the failure's status, after every process ended
    assert wire.slot_output(done.stdout, 3) == "0 3 0 1 3\n"
    assert wire.slot_output(done.stdout, 4) == "1 3 0 1 4\nbench: GPU 1 exited with status 3\n"
    assert wire.slot_output(done.stdout, 5) == "2 3 0 1 5\n"  # finished after slot 4 failed


# ---- the fault that makes a GPU slow


def test_the_slow_fault_delays_each_step_of_its_slot_only() -> None:
    assert faults.parse("slow@1,exit@2") == {1: "slow", 2: "exit"}
    calls: list[int] = []

    def step(value: int) -> None:
        calls.append(value)
        time.sleep(0.05)

    assert faults.slowed(step, None) is step and faults.slowed(step, "exit") is step
    slow = faults.slowed(step, "slow")
    started = time.perf_counter()
    slow(7)
    assert time.perf_counter() - started >= 0.05 * (1 + faults.SLOW_FACTOR) and calls == [7]

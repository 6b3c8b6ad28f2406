"""nccl-tests beside the probe (bench.nccl_tests): finding all_reduce_perf, its command, reading
its result table, and when a sweep runs it. No GPU here: nothing runs all_reduce_perf for real."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine

from bench import nccl_tests
from bench.launchers.local import LocalLauncher
from bench.plan import local_placement
from bench.schema import ProbeRow
from bench.spec import HostSlots, ProbeSpec
from bench.stages import beside_nccl_tests

# The layout of all_reduce_perf's report (header lines, one row per size: out-of-place then
# in-place time/algbw/busbw/#wrong). The figures are made up: only the layout is nccl-tests'.
OUTPUT = """\
# nThread 1 nGpus 2 minBytes 100000000 maxBytes 100000000 step: 1048576(bytes) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
   100000000      25000000     float     sum      -1    800.0  125.00  125.00      0    790.0  126.58  126.58      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 125.79
"""  # noqa: E501


def test_reads_the_out_of_place_figures_at_the_probe_size() -> None:
    assert nccl_tests.parse(OUTPUT, 100_000_000) == 125.0
    assert nccl_tests.parse(OUTPUT, 8) is None  # no row at that size
    wrong = OUTPUT.replace("125.00      0    790.0", "125.00      3    790.0")
    assert nccl_tests.parse(wrong, 100_000_000) is None  # wrong results are no figure


def test_command_is_one_process_over_the_probe_gpus_at_its_size() -> None:
    argv = nccl_tests.argv(Path("/x/all_reduce_perf"), 100_000_002, 4, 20)
    assert argv == [
        "/x/all_reduce_perf",
        "-b",
        "100000000",
        "-e",
        "100000000",
        "-g",
        "4",
        "-n",
        "20",
        "-w",
        "5",
        "-c",
        "1",
    ]


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


def test_finds_the_newest_role_install_or_what_was_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert nccl_tests.find_binary(prefix=tmp_path) is None
    executable(tmp_path / "2.9.10" / "bin" / "all_reduce_perf")
    newest = executable(tmp_path / "2.19.6" / "bin" / "all_reduce_perf")
    assert nccl_tests.find_binary(prefix=tmp_path) == newest
    assert nccl_tests.find_binary(str(newest.parent)) == newest
    assert nccl_tests.find_binary(str(tmp_path / "nope")) is None
    on_path = executable(tmp_path / "path" / "all_reduce_perf")
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}{os.environ['PATH']}")
    assert nccl_tests.find_binary(prefix=tmp_path) == on_path


def test_a_failing_run_is_a_note_not_a_figure(tmp_path: Path) -> None:
    result = nccl_tests.measure(executable(tmp_path / "all_reduce_perf"), 1000, 2, 5)
    assert result.busbw_gbps is None and "(exit 1)" in result.note


def probe_row(device: str, hosts: tuple[HostSlots, ...]) -> tuple[ProbeRow, ProbeSpec]:
    spec = ProbeSpec("s", "allreduce-n2", hosts, 100_000_000, 20, device, 1)
    row = ProbeRow(
        "s",
        "allreduce-n2",
        "ok",
        "",
        "t",
        2,
        len(hosts),
        2,
        "localhost:2",
        device,
        "nccl",
        "",
        100_000_000,
        20,
        0.001,
        100.0,
        100.0,
    )
    return row, spec


def test_when_a_sweep_runs_it(tmp_path: Path) -> None:
    gpu_config = config_for(["--nccl-tests", str(tmp_path / "missing")], gpu_machine(gpus=2))
    row, spec = probe_row("cuda", local_placement(2))
    missing = beside_nccl_tests(row, spec, gpu_config, LocalLauncher())
    assert missing.nccl_tests.startswith("not installed") and missing.nccl_tests_busbw_gbps is None
    cpu_row, cpu_spec = probe_row("cpu", local_placement(2))
    assert beside_nccl_tests(cpu_row, cpu_spec, gpu_config, LocalLauncher()) == cpu_row
    two_nodes = (HostSlots("a", 1), HostSlots("b", 1))
    far_row, far_spec = probe_row("cuda", two_nodes)
    far = beside_nccl_tests(far_row, far_spec, gpu_config, LocalLauncher())
    assert "MPI" in far.nccl_tests
    off = config_for(["--nccl-tests", "off"], gpu_machine(gpus=2))
    assert beside_nccl_tests(row, spec, off, LocalLauncher()) == row
    assert config_for([], cpu_machine()).nccl_tests == ""


def test_the_probe_table_sets_nccl_tests_beside_the_probe() -> None:
    import dataclasses

    from bench.report.tables import probe_table

    row, _ = probe_row("cuda", local_placement(2))
    assert "nccl-tests" not in " ".join(probe_table([row]))  # a CPU-style table: no column
    measured = dataclasses.replace(row, nccl_tests_busbw_gbps=125.0, nccl_tests="all_reduce_perf")
    table = probe_table([measured])
    assert table[0].endswith("| nccl-tests busbw GB/s (all_reduce_perf, same size) |")
    assert table[2].endswith("| 100.00 | 100.00 | 125.00 |")

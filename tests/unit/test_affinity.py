"""--cpu-affinity: NVML's bitmask, each local rank's share of its GPU's cores, the knob and its
column, and the rank pinning itself (on CPU, with a stand-in for NVML's answer)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import sys
import threading
import types
from collections.abc import Iterator

import pytest
from bench_builders import config_for, cpu_machine

from bench import rows
from bench.launchers import ExecResult
from bench.options import parse_request
from bench.plan import local_placement, plan_sweep, why_not_runnable
from bench.rank import affinity
from bench.rank.affinity import (
    cores_of_mask,
    format_cpu_list,
    mask_words,
    parse_cpu_list,
    rank_cores,
)
from bench.schema import RunRow, knob_columns
from bench.shared import wire
from bench.spec import Variant


def nvml_words(cores: set[int], count: int) -> ctypes.Array[ctypes.c_ulonglong]:
    """What nvidia-ml-py's nvmlDeviceGetCpuAffinity returns: `count` c_ulonglong words, bit b of
    word i for CPU 64 i + b (its pynvml.py 13.615.71; NVML API reference, read 2026-11-27); CPUs
    beyond the words asked for are not reported."""
    words = [0] * count
    for cpu in (c for c in cores if c < 64 * count):
        words[cpu // 64] |= 1 << (cpu % 64)
    return (ctypes.c_ulonglong * count)(*words)


# ---- the bitmask


def test_mask_words_cover_every_cpu() -> None:
    assert [mask_words(n) for n in (1, 2, 64, 65, 128, 256)] == [1, 1, 1, 2, 2, 4]


def test_cores_of_a_mask_of_several_64_bit_words() -> None:
    assert cores_of_mask([0x3, 0x3]) == {0, 1, 64, 65}
    assert cores_of_mask([0, 1 << 63, 0x5]) == {127, 128, 130}
    assert cores_of_mask([0, 0]) == frozenset()
    node1 = set(range(48, 96)) | set(range(144, 192))  # 2 x 48 cores, hyperthreads from 96
    assert cores_of_mask(nvml_words(node1, mask_words(192))) == node1
    assert cores_of_mask([0x3, 0x3], word_bits=32) == {0, 1, 32, 33}


def test_cpu_lists_read_and_write_linux_format() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("5") == [5] and parse_cpu_list("") == []
    assert format_cpu_list({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    assert format_cpu_list([]) == ""


# ---- each local rank's share


def test_ranks_sharing_a_node_split_it_into_contiguous_shares() -> None:
    node = set(range(12))

    def shares(count: int) -> list[str]:
        return [format_cpu_list(rank_cores([node] * count, r, node)) for r in range(count)]

    assert shares(1) == ["0-11"]
    assert shares(2) == ["0-5", "6-11"]
    assert shares(3) == ["0-3", "4-7", "8-11"]
    assert shares(5) == ["0-1", "2-3", "4-5", "6-7", "8-9"]  # equal shares; 10-11 unused


def test_hyperthread_siblings_stay_together() -> None:
    node = set(range(8)) | set(range(32, 40))  # CPU c + 32 is c's sibling

    def share(rank: int, count: int) -> str:
        return format_cpu_list(rank_cores([node] * count, rank, node, lambda c: c % 32))

    assert [share(r, 2) for r in range(2)] == ["0-3,32-35", "4-7,36-39"]
    assert [share(r, 3) for r in range(3)] == ["0-1,32-33", "2-3,34-35", "4-5,36-37"]


def test_each_gpu_takes_its_own_node_and_shares_are_equal_across_nodes() -> None:
    node0, node1 = set(range(8)), set(range(8, 16))
    allowed = node0 | node1
    four = [node0, node0, node1, node1]
    assert [format_cpu_list(rank_cores(four, r, allowed)) for r in range(4)] == [
        "0-3",
        "4-7",
        "8-11",
        "12-15",
    ]
    uneven = [node0, node0, node0, node1]  # each gets 8 // 3 = 2 cores, node1's rank too
    assert [format_cpu_list(rank_cores(uneven, r, allowed)) for r in range(4)] == [
        "0-1",
        "2-3",
        "4-5",
        "8-9",
    ]


def test_only_allowed_cores_are_handed_out() -> None:
    node = set(range(12))
    bound = set(range(6))  # Slurm or a cgroup allows half of the node
    assert [format_cpu_list(rank_cores([node, node], r, bound)) for r in range(2)] == [
        "0-2",
        "3-5",
    ]
    assert rank_cores([node], 0, {20, 21}) == frozenset()  # nothing near the GPU is allowed
    assert rank_cores([node] * 3, 0, {0, 1}) == frozenset()  # fewer cores than ranks
    # a rank whose node is not allowed at all does not shrink the others' shares
    assert format_cpu_list(rank_cores([node, set(range(12, 24))], 0, node)) == "0-11"


# ---- the rank pinning itself


@pytest.fixture
def restored_affinity() -> Iterator[set[int]]:
    allowed = os.sched_getaffinity(0)
    threads_before = set(os.listdir("/proc/self/task"))
    try:
        yield allowed
    finally:
        os.sched_setaffinity(0, allowed)
        for task in set(os.listdir("/proc/self/task")) | threads_before:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(task), allowed)


def stand_in_nvml(monkeypatch: pytest.MonkeyPatch, by_gpu: dict[int, set[int]]) -> list[str]:
    """A pynvml module answering nvmlDeviceGetCpuAffinity as nvidia-ml-py does, on a machine
    with every CPU it names; the handle of CUDA device d is d (the real lookup goes through
    torch.cuda)."""
    calls: list[str] = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCpuAffinity = lambda handle, size: nvml_words(by_gpu[handle], size)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(affinity, "nvml_handle", lambda pynvml, device: device)
    cpus = max(max(c) for c in by_gpu.values()) + 1
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    return calls


def test_pin_rank_sets_this_process_and_its_running_threads(
    monkeypatch: pytest.MonkeyPatch,
    restored_affinity: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    allowed = sorted(restored_affinity)
    # both GPUs hang off one node: the allowed CPUs and one the process may not use
    node = set(allowed) | {max(allowed) + 1}
    calls = stand_in_nvml(monkeypatch, {0: node, 1: node})
    ranks = 2 if len(allowed) >= 2 else 1
    expected = set(allowed[len(allowed) // ranks * (ranks - 1) : len(allowed) // ranks * ranks])
    stop = threading.Event()
    running = threading.Thread(target=stop.wait)
    running.start()
    try:
        pinned = affinity.pin_rank(ranks - 1, ranks, 1, "cuda", physical=lambda c: c)
        assert pinned == expected
        assert os.sched_getaffinity(0) == expected
        assert os.sched_getaffinity(running.native_id) == expected  # started before pinning
    finally:
        stop.set()
        running.join()
    assert calls == ["init", "shutdown"]
    assert f"pinned to {len(expected)} cores" in capsys.readouterr().err


def test_a_dataparallel_process_takes_the_cores_of_all_its_gpus(
    monkeypatch: pytest.MonkeyPatch, restored_affinity: set[int]
) -> None:
    first, *rest = sorted(restored_affinity)
    stand_in_nvml(monkeypatch, {0: {first}, 1: set(rest) or {first}})
    assert affinity.pin_rank(0, 1, 2, "cuda", physical=lambda c: c) == restored_affinity


def test_a_rank_that_cannot_be_pinned_keeps_its_affinity_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    restored_affinity: set[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert affinity.pin_rank(0, 1, 1, "cpu") is None
    assert "runs on CPU" in capsys.readouterr().err

    def no_nvml(devices: object) -> list[frozenset[int]]:
        raise ImportError("No module named 'pynvml'")

    assert affinity.pin_rank(0, 1, 1, "cuda", gpu_cores=no_nvml) is None
    assert "NVML did not answer (ImportError" in capsys.readouterr().err
    far = max(restored_affinity) + 1  # a core the process may not use
    stand_in_nvml(monkeypatch, {0: {far}})
    assert affinity.pin_rank(0, 1, 1, "cuda") is None
    err = capsys.readouterr().err
    assert err.count("bench: ") == 1 and f"GPU's cores ({far})" in err
    assert os.sched_getaffinity(0) == restored_affinity


# ---- the knob, the run id and the row


def test_the_knob_sweeps_off_and_on_and_is_off_by_default() -> None:
    assert parse_request(["--cpu-affinity", "off,on"]).values["cpu_affinity"] == (False, True)
    assert parse_request(["--cpu-affinity", "on"]).values["cpu_affinity"] == (True,)
    with pytest.raises(SystemExit):
        parse_request(["--cpu-affinity", "numa"])
    assert [v.cpu_affinity for v in config_for([], cpu_machine()).variants()] == [False]
    config = config_for(["--cpu-affinity", "off,on"], cpu_machine())
    assert [v.cpu_affinity for v in config.variants()] == [False, True]
    off, on = config.variants()
    assert on.label == off.label + "-pinned"  # unpinned run ids stay as they were
    older = {k: v for k, v in dataclasses.asdict(off).items() if k != "cpu_affinity"}
    assert Variant(**older) == off  # a store from before the knob still loads


def test_the_row_records_the_knob_and_the_cores_the_ranks_ran_on() -> None:
    assert ("cpu_affinity", bool) in knob_columns()
    argv = ["--gpus", "2", "--launchers", "ddp", "--cpu-affinity", "on"]
    config = config_for(argv, cpu_machine())
    spec = plan_sweep(config, "s", local_placement(2), 2)[0]
    ranks = [
        wire.RankReport(r, r, "vm", "cpu", 2.0, [1.0, 1.0], 0.0, None, cpu_cores=cores)
        for r, cores in enumerate((4, 3))
    ]
    report = wire.RunReport(spec.run_id, "gloo", 2, 10, 16, ranks=ranks)
    output = "\n".join(wire.encode(spec.run_id, dataclasses.asdict(report)))
    row = rows.run_row(spec, ExecResult(0, False, 1.0, output), "t0")
    assert isinstance(row, RunRow) and row.status == "ok"
    assert (row.cpu_affinity, row.cpu_cores_per_rank) == (True, 3)
    assert row.variant.endswith("-pinned")


def test_tf_runs_with_the_knob_on_are_unavailable_with_the_reason() -> None:
    argv = ["--gpus", "1", "--launchers", "tf", "--image-size", "64", "--cpu-affinity", "on"]
    spec = plan_sweep(config_for(argv, cpu_machine()), "s", local_placement(1), 1)[0]
    assert "--cpu-affinity" in why_not_runnable(spec)

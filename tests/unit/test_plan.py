"""Planning: rank counts, placements, threads, run order and run specs."""

from __future__ import annotations

import re

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine

from bench.hosts import default_rank_counts
from bench.plan import (
    local_placement,
    place_ranks,
    plan_probes,
    plan_sweep,
    threads_per_rank,
)
from bench.spec import HostSlots, RunSpec, format_hosts


@pytest.mark.parametrize(
    ("max_ranks", "expected"),
    [(1, (1,)), (2, (1, 2)), (6, (1, 2, 4, 6)), (8, (1, 2, 4, 8)), (12, (1, 2, 4, 8, 12))],
)
def test_default_rank_counts(max_ranks: int, expected: tuple[int, ...]) -> None:
    assert default_rank_counts(max_ranks) == expected


def test_default_rank_counts_rejects_zero() -> None:
    with pytest.raises(ValueError):
        default_rank_counts(0)


def test_local_placement_and_host_spelling() -> None:
    assert local_placement(2) == (HostSlots("localhost", 2),)
    assert format_hosts((HostSlots("node1", 8), HostSlots("node2", 8))) == "node1:8,node2:8"


def test_place_ranks_fills_hosts_in_order() -> None:
    hosts = (HostSlots("a", 8), HostSlots("b", 8))
    assert place_ranks(4, hosts) == (HostSlots("a", 4),)
    assert place_ranks(8, hosts) == (HostSlots("a", 8),)
    assert place_ranks(12, hosts) == (HostSlots("a", 8), HostSlots("b", 4))
    assert place_ranks(16, hosts) == hosts
    with pytest.raises(ValueError, match="17 ranks do not fit on 16 slots"):
        place_ranks(17, hosts)
    with pytest.raises(ValueError):
        place_ranks(0, hosts)


@pytest.mark.parametrize(
    ("cores", "ranks", "expected"), [(2, 1, 2), (2, 2, 1), (2, 4, 1), (16, 8, 2), (32, 3, 10)]
)
def test_threads_per_rank_divides_cores(cores: int, ranks: int, expected: int) -> None:
    assert threads_per_rank(cores, ranks) == expected


def test_plan_order_ids_and_knobs() -> None:
    config = config_for(["--repeats", "2", "--launchers", "ddp,horovod"], cpu_machine())
    specs = plan_sweep(config, "sweep1", local_placement(2), cores_per_host=2)
    # 2 repeats x 2 launchers x GPU counts (1, 2)
    assert [s.run_id for s in specs] == [
        "ddp-n1-fp32-nchw-r0",
        "ddp-n2-fp32-nchw-r0",
        "horovod-n1-fp32-nchw-r0",
        "horovod-n2-fp32-nchw-r0",
        "ddp-n1-fp32-nchw-r1",
        "ddp-n2-fp32-nchw-r1",
        "horovod-n1-fp32-nchw-r1",
        "horovod-n2-fp32-nchw-r1",
    ]
    one, two = specs[0], specs[1]
    assert one.placement == (HostSlots("localhost", 1),) and one.threads_per_rank == 2
    assert two.placement == (HostSlots("localhost", 2),) and two.threads_per_rank == 1
    assert (two.world_size, two.nodes, two.gpus_per_node, two.hosts) == (2, 1, 2, "localhost:2")
    assert (two.batch_per_gpu, two.global_batch, two.scaling) == (8, 16, "weak")
    assert two.workload.image_size == 32 and two.workload.device == "cpu"


def test_plan_crosses_variants() -> None:
    config = config_for(
        [
            "--precision",
            "fp32,amp-bf16",
            "--memory-format",
            "nchw,channels_last",
            "--compile",
            "off,on",
            "--launchers",
            "ddp",
            "--gpus",
            "1",
            "--repeats",
            "1",
        ],
        gpu_machine(),
    )
    labels = [s.variant.label for s in plan_sweep(config, "s", local_placement(1), 32)]
    assert len(labels) == 8 and len(set(labels)) == 8
    assert "amp-bf16-channels_last-compile" in labels


def test_strong_scaling_splits_the_global_batch() -> None:
    config = config_for(["--global-batch", "512", "--gpus", "1,2,4"], gpu_machine())
    specs = [s for s in plan_sweep(config, "s", local_placement(4), 32) if s.repeat == 0]
    assert {(s.world_size, s.batch_per_gpu, s.global_batch, s.scaling) for s in specs} == {
        (1, 512, 512, "strong"),
        (2, 256, 512, "strong"),
        (4, 128, 512, "strong"),
    }


def test_multi_host_placement_in_specs() -> None:
    config = config_for(["--gpus", "8,16", "--launchers", "ddp", "--repeats", "1"], gpu_machine(16))
    hosts = (HostSlots("node1", 8), HostSlots("node2", 8))
    specs = plan_sweep(config, "s", hosts, cores_per_host=32)
    assert [s.hosts for s in specs] == ["node1:8", "node1:8,node2:8"]
    assert [(s.nodes, s.gpus_per_node, s.threads_per_rank) for s in specs] == [(1, 8, 4), (2, 8, 4)]


def test_run_spec_round_trips_as_one_shell_safe_argument() -> None:
    config = config_for(["--gpus", "2"], cpu_machine())
    spec = plan_sweep(config, "s", local_placement(2), 2)[0]
    encoded = spec.encode()
    assert re.fullmatch(r"[A-Za-z0-9_=-]+", encoded)
    assert RunSpec.decode(encoded) == spec


def test_probes_only_where_ranks_communicate() -> None:
    config = config_for(["--gpus", "1,2"], cpu_machine())
    probes = plan_probes(config, "s", local_placement(2), 2)
    assert [(p.probe_id, p.world_size, p.nbytes) for p in probes] == [
        ("allreduce-n2", 2, 100_000_000)
    ]
    assert plan_probes(config_for(["--no-probe"], cpu_machine()), "s", local_placement(2), 2) == []


def test_tf_reads_real_data_through_tf_data_whatever_loader_the_torch_launchers_use(
    tmp_path,
) -> None:
    argv = ["--gpus", "1,2", "--launchers", "ddp,tf", "--data", str(tmp_path), "--repeats", "1"]
    config = config_for([*argv, "--loader", "torch,nvjpeg"], gpu_machine())
    specs = plan_sweep(config, "s", local_placement(2), 8)
    tf = [s for s in specs if s.launcher == "tf"]
    # one tf run per GPU count (not one per --loader value), each reading through tf.data
    assert [(s.world_size, s.variant.loader) for s in tf] == [(1, "tfdata"), (2, "tfdata")]
    assert [s.run_id for s in tf] == [
        "tf-n1-amp-bf16-nchw-tfdata-r0",
        "tf-n2-amp-bf16-nchw-tfdata-r0",
    ]
    ddp = [s.variant.loader for s in specs if s.launcher == "ddp"]
    assert ddp == ["torch", "torch", "nvjpeg", "nvjpeg"]
    # synthetic data has no loader for any launcher
    synthetic = plan_sweep(config_for(argv[:4], gpu_machine()), "s", local_placement(2), 8)
    assert {s.variant.loader for s in synthetic} == {"none"}
    # one process drives a node's GPUs: it gets the node's cores, as DataParallel's does
    assert {s.threads_per_rank for s in tf} == {8}

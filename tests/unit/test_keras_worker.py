"""The TensorFlow rank (bench.rank.keras_worker) on CPU: its step against plain Keras, its row
through bench.shared.wire, two workers under TF_CONFIG; and what it refuses (bench.shared.tf_rules).

The TensorFlow tests need tensorflow-cpu (constraints.txt; scripts/test.sh installs it): they
skip without it, and fail under GPURIG_REQUIRE_ALL_TESTS=1 (CI) so nothing passes by skipping.
Each runs real processes: TensorFlow's devices are fixed once per process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench import datasets
from bench.shared import wire
from bench.shared.tf_rules import tf_config, why_not_runnable, worker_of
from bench.spec import NO_LOADER, HostSlots, RunSpec, Variant

sys.path.insert(0, str(Path(__file__).parent))
from keras_step_check import spec_for

REPO = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("keras_step_check.py")
TIMEOUT_S = 240


@pytest.fixture
def tensorflow() -> None:
    if importlib.util.find_spec("tensorflow") is None:
        if os.environ.get("GPURIG_REQUIRE_ALL_TESTS") == "1":
            pytest.fail("GPURIG_REQUIRE_ALL_TESTS=1 but tensorflow is not installed")
        pytest.skip("tensorflow is not installed (pip install -c constraints.txt tensorflow-cpu)")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start(argv: list[str], tf_config_value: str = "") -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    if tf_config_value:
        env["TF_CONFIG"] = tf_config_value
    return subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )


def run_workers(argv: list[str], workers: int) -> list[tuple[int, str]]:
    """(exit status, output) of `workers` processes, with TF_CONFIG when there are several."""
    ports = free_ports(workers)
    hosts = [f"localhost:{p}" for p in ports]
    procs = [start(argv, tf_config(hosts, 0, i) if workers > 1 else "") for i in range(workers)]
    results = []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        results.append((proc.returncode, output))
    return results


def tiny_spec(nodes: int, slots: int, **workload: object) -> RunSpec:
    spec = spec_for(nodes, slots, 32, "resnet50")
    load = dataclasses.replace(spec.workload, warmup_steps=1, timed_steps=2, **workload)
    return dataclasses.replace(spec, run_id="tf-tiny", workload=load)


def row_of(spec: RunSpec, output: str) -> wire.RunReport:
    payload = wire.decode(spec.run_id, output)
    assert payload is not None, output[-3000:]
    return wire.RunReport.from_dict(payload)


# --- without TensorFlow: what is refused, TF_CONFIG --------------------------------------------


def test_tf_config_round_trips_through_worker_of() -> None:
    text = tf_config(["node1", "node2:2300"], 2222, 1)
    assert json.loads(text)["cluster"]["worker"] == ["node1:2222", "node2:2300"]
    assert worker_of({"TF_CONFIG": text}) == (1, 2)
    assert worker_of({}) == (0, 1)
    with pytest.raises(ValueError, match="worker task"):
        worker_of({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"]}, "task": {}})})


def test_refusals_name_the_reason() -> None:
    spec = tiny_spec(1, 1)
    assert why_not_runnable(spec) is None

    def variant(**fields: object) -> RunSpec:
        return dataclasses.replace(spec, variant=dataclasses.replace(spec.variant, **fields))

    def load(**fields: object) -> RunSpec:
        return dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, **fields))

    assert "accumulation" in str(why_not_runnable(variant(grad_accum=2)))
    assert "checkpointing" in str(why_not_runnable(variant(activation_checkpointing=True)))
    assert "ResNet50 only" in str(why_not_runnable(load(model="resnet18")))
    assert "32 px" in str(why_not_runnable(load(image_size=16)))
    assert "compression" in str(why_not_runnable(load(fp16_allreduce=True)))
    assert "tf.data" in str(why_not_runnable(load(data="/srv/imagenet")))
    uneven = (HostSlots("a", 2), HostSlots("b", 1))
    assert "same number" in str(why_not_runnable(dataclasses.replace(spec, placement=uneven)))
    two_cpus_each = (HostSlots("a", 2), HostSlots("b", 2))
    assert "one CPU device" in str(
        why_not_runnable(dataclasses.replace(spec, placement=two_cpus_each))
    )
    bf16_nchw_xla = Variant("amp-bf16", False, True, NO_LOADER)
    assert why_not_runnable(dataclasses.replace(spec, variant=bf16_nchw_xla)) is None


# --- with TensorFlow -----------------------------------------------------------------------------


@pytest.mark.usefixtures("tensorflow")
@pytest.mark.parametrize("argv", [["mirrored", "2"], ["resnet"]], ids=["2-replicas", "resnet50"])
def test_step_trains_as_plain_keras(argv: list[str]) -> None:
    """2 replicas in one process (small net) and ResNet-50 as the worker builds it (1 replica):
    the weights after 3 steps equal train_on_batch's on the global batch."""
    [(status, output)] = run_workers([str(CHECK), *argv], 1)
    assert status == 0, output[-3000:]
    replicas = argv[1] if len(argv) > 1 else "1"
    assert f"KERAS_STEP_CHECK_OK replicas={replicas}" in output, output[-3000:]


@pytest.mark.usefixtures("tensorflow")
def test_two_workers_under_tf_config_train_as_plain_keras() -> None:
    results = run_workers([str(CHECK), "multiworker"], 2)
    assert all(status == 0 for status, _ in results), results[0][1][-3000:] + results[1][1][-3000:]
    assert "KERAS_STEP_CHECK_OK replicas=2" in results[0][1]  # worker 0 compared; both agreed


@pytest.mark.usefixtures("tensorflow")
def test_two_workers_print_one_row_with_both() -> None:
    spec = tiny_spec(2, 1)
    argv = ["-m", "bench.rank.keras_worker", "--spec", spec.encode()]
    (status0, output0), (status1, output1) = run_workers(argv, 2)
    assert status0 == status1 == 0, output0[-3000:] + output1[-3000:]
    report = row_of(spec, output0)
    assert wire.decode(spec.run_id, output1) is None  # only rank 0 prints
    assert (report.world_size, report.backend) == (2, "ring")
    assert [r.rank for r in report.ranks] == [0, 1]
    assert all(len(r.step_s) == report.timed_steps == 2 for r in report.ranks)


@pytest.mark.usefixtures("tensorflow")
def test_refused_run_exits_with_the_reason() -> None:
    spec = dataclasses.replace(
        tiny_spec(1, 1), variant=dataclasses.replace(tiny_spec(1, 1).variant, grad_accum=2)
    )
    [(status, output)] = run_workers(["-m", "bench.rank.keras_worker", "--spec", spec.encode()], 1)
    assert status != 0 and "gradient accumulation is not implemented for tf" in output
    assert wire.decode(spec.run_id, output) is None


@pytest.mark.usefixtures("tensorflow")
def test_image_folder_through_tf_data_prints_a_row_the_controller_reads(tmp_path: Path) -> None:
    """One worker reading an ImageFolder through tf.data: the row bench.shared.wire carries.
    (The synthetic input's single worker runs in the integration sweeps: test_bench_sweep's tf-n1,
    test_multihost's one-node tf run; one ResNet-50 process fewer here.)"""
    root = tmp_path / "train"
    datasets.make_jpeg_folder(root, images=12, size=(40, 30), classes=3, seed=1)
    spec = tiny_spec(1, 1, data=str(root))
    spec = dataclasses.replace(spec, variant=dataclasses.replace(spec.variant, loader="tfdata"))
    [(status, output)] = run_workers(["-m", "bench.rank.keras_worker", "--spec", spec.encode()], 1)
    assert status == 0, output[-3000:]
    report = row_of(spec, output)
    assert (report.world_size, report.backend, report.timed_steps) == (1, "none", 2)
    assert report.images_per_rank == spec.batch_per_gpu * 2
    [rank] = report.ranks
    assert len(rank.step_s) == 2 and all(s > 0 for s in rank.step_s)
    assert rank.window_s >= sum(rank.step_s) * 0.99 and rank.data_wait_s >= 0
    assert rank.warmup_steps == 1 and rank.device_name == "cpu"
    assert report.images_per_rank * report.world_size / rank.window_s > 0  # images/s
    assert rank.runtime["tensorflow"] and report.gradient_bytes > 90e6  # ResNet-50's gradients
    assert rank.loader_images_per_s and rank.loader_images_per_s > 0

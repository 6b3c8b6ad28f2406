"""GPU defaults resolved for described GPUs (no GPU needed)."""

from __future__ import annotations

import dataclasses

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine

from bench.gpu_defaults import GpuDescription, batch_for_memory, gpu_defaults
from bench.machine import Environment

# name, capability and memory as torch.cuda.get_device_properties reports them
H100 = GpuDescription("NVIDIA H100 80GB HBM3", (9, 0), 85.0)
A100_40 = GpuDescription("NVIDIA A100-SXM4-40GB", (8, 0), 42.4)
V100_16 = GpuDescription("Tesla V100-SXM2-16GB", (7, 0), 16.9)
T4 = GpuDescription("Tesla T4", (7, 5), 15.8)
P100 = GpuDescription("Tesla P100-PCIE-12GB", (6, 0), 12.8)


def test_hopper_gets_the_whole_fast_path() -> None:
    chosen = gpu_defaults(H100)
    assert (chosen.precision, chosen.channels_last, chosen.compile, chosen.batch_per_gpu) == (
        "amp-bf16",
        True,
        True,
        256,
    )
    assert set(chosen.reasons) == {"precision", "channels_last", "compile", "batch_size"}
    assert "9.0 has bf16" in chosen.reasons["precision"]


def test_ampere_40gb() -> None:
    chosen = gpu_defaults(A100_40)
    assert (chosen.precision, chosen.channels_last, chosen.compile, chosen.batch_per_gpu) == (
        "amp-bf16",
        True,
        True,
        256,
    )


@pytest.mark.parametrize("gpu", [V100_16, T4])
def test_before_ampere_fp16_channels_last_no_compile(gpu: GpuDescription) -> None:
    chosen = gpu_defaults(gpu)
    assert (chosen.precision, chosen.channels_last, chosen.compile, chosen.batch_per_gpu) == (
        "amp-fp16",
        True,
        False,
        128,
    )
    assert "no bf16" in chosen.reasons["precision"]


def test_no_tensor_cores() -> None:
    chosen = gpu_defaults(P100)
    assert (chosen.precision, chosen.channels_last, chosen.compile, chosen.batch_per_gpu) == (
        "fp32",
        False,
        False,
        64,
    )


def test_memory_classes() -> None:
    assert [batch_for_memory(gb) for gb in (150.0, 38.0, 37.9, 24.0, 15.0, 8.0)] == [
        256,
        256,
        128,
        128,
        128,
        64,
    ]


def described(gpu: GpuDescription) -> Environment:
    return dataclasses.replace(
        gpu_machine(gpus=1, name=gpu.name, ampere=gpu.capability >= (8, 0)),
        gpu_capability=gpu.capability,
        gpu_memory_gb=gpu.memory_gb,
    )


def test_a_sweep_on_a_described_gpu_takes_these_defaults_and_the_user_overrides_them() -> None:
    config = config_for([], described(H100))
    assert config.axes["precision"] == ("amp-bf16",)
    assert config.axes["channels_last"] == (True,) and config.axes["compile"] == (True,)
    assert config.batch_size == 256 and config.workload.timed_seconds == 15.0
    t4 = config_for([], described(T4))
    assert (t4.axes["precision"], t4.axes["compile"], t4.batch_size) == (
        ("amp-fp16",),
        (False,),
        128,
    )
    asked = config_for(
        [
            "--memory-format",
            "nchw,channels_last",
            "--compile",
            "off",
            "--batch-size",
            "128",
            "--timed-seconds",
            "0",
        ],
        described(H100),
    )
    assert asked.axes["channels_last"] == (False, True) and asked.axes["compile"] == (False,)
    assert asked.batch_size == 128 and asked.workload.timed_seconds == 0.0
    cpu = config_for([], cpu_machine())
    assert (cpu.axes["channels_last"], cpu.axes["compile"], cpu.batch_size) == (
        (None,),  # each launcher's own layout (test_launcher_registry)
        (False,),
        8,
    )
    assert cpu.workload.timed_seconds == 0.0  # CPU smoke runs keep fixed step counts


def test_the_report_says_why_each_default_the_user_kept_was_chosen() -> None:
    from bench import report
    from bench.machine_defaults import chosen_defaults
    from bench.options import parse_request

    kept = chosen_defaults(parse_request(["--compile", "off"]), described(H100))
    assert [w.split(":")[0] for w in kept] == [
        "precision amp-bf16",
        "memory format channels_last",
        "batch 256 per GPU",
    ]  # compile was set by the user: no reason to give
    assert chosen_defaults(parse_request([]), cpu_machine()) == []
    config = config_for(["--compile", "off"], described(H100))
    meta = {"config": config.to_dict(), "defaults_chosen": kept, "system": {}}
    text = report.markdown(meta, [], [], [], [])
    assert "Defaults chosen for this GPU" in text and "- batch 256 per GPU: 85 GB of memory" in text
    assert "timed window: 15 s (at least 100 steps" in text  # not "100 timed steps"

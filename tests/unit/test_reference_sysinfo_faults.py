"""Published figures and peaks, telemetry arithmetic, environment capture, fault injection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import machine, reference
from bench.rank import faults
from bench.shared import telemetry


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA A40", "A40"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("NVIDIA RTX A4000", None),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_identify_gpu(name: str, expected: str | None) -> None:
    found = reference.identify_gpu(name)
    assert (found.name if found else None) == expected


def test_peaks_by_precision() -> None:
    h100 = reference.identify_gpu("NVIDIA H100 80GB HBM3")
    v100 = reference.identify_gpu("Tesla V100-SXM2-16GB")
    assert h100 is not None and v100 is not None
    assert reference.peak_flops(h100, "amp-bf16") == 989.4e12
    assert reference.peak_flops(h100, "fp32") == 67e12
    assert reference.peak_flops(v100, "amp-fp16") == 125e12
    assert reference.peak_flops(v100, "amp-bf16") is None
    assert reference.peak_flops(v100, "tf32") is None


def test_flops_per_image_scales_with_pixels() -> None:
    assert reference.flops_per_image("resnet50", 224) == 24.6e9
    assert reference.flops_per_image("resnet50", 112) == pytest.approx(6.15e9)
    assert reference.flops_per_image("vgg16", 224) is None


def test_published_figures_match_gpu_and_precision() -> None:
    a100 = reference.identify_gpu("NVIDIA A100-SXM4-80GB")
    assert a100 is not None
    tf32 = reference.published_for(a100, "tf32")
    assert {(p.gpus, p.images_per_s_per_gpu) for p in tf32} == {
        (1, 1066.0),
        (8, 7397 / 8),
        (1, 938.0),
        (8, 906.0),
    }
    assert {p.images_per_s_per_gpu for p in reference.published_for(a100, "amp-fp16")} == {
        1582.0,
        11439 / 8,
        2470.0,
        16621 / 8,
    }
    assert reference.published_for(a100, "fp32") == []
    assert all(p.url.startswith("https://") for p in reference.PUBLISHED)
    # the H100 PCIe's figures are not the SXM's
    pcie = reference.identify_gpu("NVIDIA H100 PCIe")
    assert pcie is not None
    assert [p.images_per_s_per_gpu for p in reference.published_for(pcie, "amp-bf16")] == [1976.0]


def test_mfu_of_published_and_measured_figures() -> None:
    h100 = reference.identify_gpu("NVIDIA H100 80GB HBM3")
    v100 = reference.identify_gpu("Tesla V100-SXM2-16GB")
    assert h100 is not None and v100 is not None
    # Lambda's 2,791 img/s AMP: 2791 * 24.6e9 / 989.4e12
    assert reference.mfu(2791, h100, "amp") == pytest.approx(0.0694, abs=1e-4)
    assert reference.mfu(5645, h100, "amp-bf16") == pytest.approx(0.1404, abs=1e-4)
    assert reference.mfu(1895, h100, "tf32") == pytest.approx(1895 * 24.6e9 / 494.7e12)
    assert reference.mfu(2000, h100, "amp-bf16", image_size=112) == pytest.approx(
        2000 * 6.15e9 / 989.4e12
    )
    assert reference.mfu(100, h100, "amp-bf16", model="vgg16") is None
    assert reference.mfu(100, v100, "amp-bf16") is None  # no bf16 on Volta


def test_nearest_published_prefers_harness_figures_at_a_close_gpu_count() -> None:
    h100 = reference.identify_gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    published = reference.published_for(h100, "amp-bf16")
    assert {p.images_per_s_per_gpu for p in published if p.ceiling} == {7000.0}
    nearest = {n: reference.nearest_published(published, n) for n in (1, 2, 6, 16)}
    assert {n: p.gpus for n, p in nearest.items() if p} == {1: 1, 2: 1, 6: 8, 16: 8}
    assert reference.nearest_published([], 1) is None


def test_h200_and_b200_have_lambdas_one_gpu_figures_and_h200_mlperfs_ceiling() -> None:
    # Lambda results_v2 (lambdal/deeplearning-benchmark aa5addb6, pytorch-train-throughput-v2-*.csv)
    # and MLPerf Training v4.0 (training_results_v4.0 NVIDIA/results/h200_ngc24.04_mxnet), read
    # 2026-11-27
    h200 = reference.identify_gpu("NVIDIA H200")
    b200 = reference.identify_gpu("NVIDIA B200")
    assert h200 is not None and b200 is not None
    amp = reference.published_for(h200, "amp-bf16")
    peer = reference.nearest_published(amp, 1)
    assert peer is not None
    assert (peer.source, peer.gpus, peer.images_per_s_per_gpu) == (
        "Lambda deeplearning-benchmark",
        1,
        3079.0,
    )
    assert peer.batch_per_gpu == 2560 and peer.url == reference.LAMBDA_V2_AMP
    assert reference.nearest_published(amp, 8) == peer  # Lambda's 8-GPU H200 rows: not listed
    [ceiling] = [p for p in amp if p.ceiling]
    assert (ceiling.source, ceiling.gpus, ceiling.images_per_s_per_gpu) == (
        "MLPerf Training v4.0 (estimate)",
        8,
        7950.0,
    )
    assert ceiling.batch_per_gpu == 400 and "h200_ngc24.04_mxnet" in ceiling.url
    assert reference.mfu(ceiling.images_per_s_per_gpu, h200, "amp") == pytest.approx(
        7950 * 24.6e9 / 989.4e12
    )
    tf32 = reference.published_for(h200, "tf32")
    assert [(p.images_per_s_per_gpu, p.batch_per_gpu) for p in tf32] == [(2259.0, 1280)]
    by_precision = {p.precision: p for p in reference.published_on(b200)}
    assert {
        k: (p.gpus, p.images_per_s_per_gpu, p.batch_per_gpu) for k, p in by_precision.items()
    } == {
        "amp": (1, 3076.0, 3328),
        "tf32": (1, 2967.0, 1664),
    }
    assert not any(p.ceiling for p in by_precision.values())  # no MLPerf B200 ResNet-50 result


def test_decode_throttle_reasons() -> None:
    assert telemetry.decode_throttle_reasons(0) == []
    assert telemetry.decode_throttle_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert telemetry.decode_throttle_reasons(0x1) == ["gpu_idle"]


def test_summarise_and_merge_telemetry() -> None:
    samples = [
        telemetry.Sample(1980.0, 650.0, 60.0, 0x0),
        telemetry.Sample(1800.0, 700.0, 70.0, 0x4),
    ]
    summary = telemetry.summarise_samples(samples)
    assert summary == {
        "sm_clock_mhz_mean": 1890.0,
        "sm_clock_mhz_min": 1800.0,
        "power_w_mean": 675.0,
        "power_w_max": 700.0,
        "temperature_c_max": 70.0,
        "throttle_reasons": ["sw_power_cap"],
    }
    other = {
        **summary,
        "sm_clock_mhz_mean": 1790.0,
        "sm_clock_mhz_min": 1700.0,
        "temperature_c_max": 75.0,
        "throttle_reasons": ["hw_slowdown"],
    }
    merged = telemetry.merge_telemetry([summary, other, {}])
    assert merged["sm_clock_mhz_mean"] == 1840.0 and merged["sm_clock_mhz_min"] == 1700.0
    assert merged["temperature_c_max"] == 75.0
    assert merged["throttle_reasons"] == ["hw_slowdown", "sw_power_cap"]
    assert telemetry.summarise_samples([]) == {} and telemetry.merge_telemetry([{}]) == {}


def test_sampler_without_a_gpu_records_nothing() -> None:
    assert telemetry.GpuSampler(None).start().stop() == {}


class NvmlLookups:
    """Records which of pynvml's lookups (nvmlDeviceGetHandleByIndex / ByUUID, their real
    names in nvidia-ml-py) a handle came from; returns the lookup and its key as the handle."""

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, object]:
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[str, object]:
        return ("uuid", uuid)


def test_a_visible_gpu_is_found_through_cuda_visible_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = NvmlLookups()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert telemetry.visible_nvml_handle(nvml, 3) == ("index", 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "6,2")  # nvidia-smi's indices, in this order
    assert telemetry.visible_nvml_handle(nvml, 1) == ("index", 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6")
    assert telemetry.visible_nvml_handle(nvml, 0) == (
        "uuid",
        "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    )


def test_relevant_environment() -> None:
    env = {
        "NCCL_IB_HCA": "mlx5",
        "GLOO_SOCKET_IFNAME": "eth0",
        "HOME": "/root",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "PATH": "/bin",
    }
    assert machine.relevant_environment(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GLOO_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "mlx5",
    }


def test_git_revision_outside_a_repository(tmp_path: Path) -> None:
    assert machine.git_revision(tmp_path)["sha"] == "unknown"


def test_fault_parsing() -> None:
    assert faults.parse("exit@1,hang@0") == {1: "exit", 0: "hang"}
    assert faults.parse("") == {}
    assert faults.fault_for(1, {faults.ENV_VAR: "exit@1"}) == "exit"
    assert faults.fault_for(0, {faults.ENV_VAR: "exit@1"}) is None
    for bad in ("crash@1", "exit", "exit@x"):
        with pytest.raises(ValueError):
            faults.parse(bad)


def test_faults_fire() -> None:
    faults.trigger(None)
    code = "from bench.rank import faults; faults.trigger('exit')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == faults.EXIT_STATUS
    assert "injecting fault 'exit'" in done.stderr
    with pytest.raises(torch.OutOfMemoryError):
        faults.trigger("oom")

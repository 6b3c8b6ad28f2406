"""Published ResNet-50 training figures and GPU peak FLOP/s, to put a measurement in context.

Figures are from shared/docs/ANCHORS.md (Lambda's deeplearning-benchmark, NVIDIA's
DeepLearningExamples, PyTorch's DDP benchmark, MLPerf Training v4.0). Peaks are NVIDIA's
datasheet dense (no sparsity) numbers. They differ from our runs in batch size, software and
data pipeline, so the report shows them as context, not as pass/fail thresholds; only the FLOP
bound is a hard limit (a result above it is a measurement bug).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One ResNet-50 training image at 224x224: forward 4.1 G multiply-adds, backward about twice
# that, 2 FLOP per multiply-add: 3 * 4.1e9 * 2 = 24.6 GFLOP.
RESNET50_FLOPS_PER_IMAGE = 24.6e9
RESNET50_IMAGE_SIZE = 224


@dataclass(frozen=True)
class GpuPeak:
    """Dense peak FLOP/s by arithmetic; None where the GPU has no such mode."""

    name: str
    fp32: float
    tf32: float | None
    fp16: float
    bf16: float | None


# Most specific first: identify_gpu returns the first entry whose every token is a word of the
# device name.
GPU_PEAKS: tuple[tuple[tuple[str, ...], GpuPeak], ...] = (
    (("H200", "NVL"), GpuPeak("H200 NVL", 60e12, 417.5e12, 835e12, 835e12)),
    (("H200",), GpuPeak("H200 SXM", 67e12, 494.7e12, 989.4e12, 989.4e12)),
    (("H100", "NVL"), GpuPeak("H100 NVL", 60e12, 417.5e12, 835e12, 835e12)),
    (("H100", "PCIE"), GpuPeak("H100 PCIe", 51e12, 378e12, 756e12, 756e12)),
    (("H100",), GpuPeak("H100 SXM", 67e12, 494.7e12, 989.4e12, 989.4e12)),
    (("A100",), GpuPeak("A100", 19.5e12, 156e12, 312e12, 312e12)),
    (("A40",), GpuPeak("A40", 37.4e12, 74.8e12, 149.7e12, 149.7e12)),
    (("V100", "PCIE"), GpuPeak("V100 PCIe", 14e12, None, 112e12, None)),
    (("V100",), GpuPeak("V100 SXM2", 15.7e12, None, 125e12, None)),
)


@dataclass(frozen=True)
class Published:
    source: str
    gpu: str  # the GpuPeak.name family it applies to ("H100", "A100", ...)
    precision: str  # "fp32", "tf32" or "amp"
    batch_per_gpu: int | None
    gpus: int
    images_per_s_per_gpu: float
    note: str = ""
    ceiling: bool = False  # MLPerf: a tuned framework and input pipeline, the realistic ceiling


PUBLISHED: tuple[Published, ...] = (
    Published("Lambda deeplearning-benchmark", "A40", "tf32", 496, 1, 390.7),
    Published("Lambda deeplearning-benchmark", "A40", "tf32", 496, 8, 3087 / 8),
    Published("Lambda deeplearning-benchmark", "A40", "amp", 928, 8, 645.0, "about"),
    Published("Lambda deeplearning-benchmark", "H100", "amp", None, 1, 2791.0, "SXM, NCHW"),
    Published("Lambda deeplearning-benchmark", "H100", "amp", None, 8, 22059 / 8, "SXM, NCHW"),
    Published("Lambda deeplearning-benchmark", "H200", "amp", None, 1, 3080.0, "NCHW"),
    Published("Lambda deeplearning-benchmark", "H200", "amp", None, 8, 24479 / 8, "NCHW"),
    Published("NVIDIA DeepLearningExamples RN50 v1.5", "A100", "tf32", 256, 1, 938.0, "80 GB"),
    Published("NVIDIA DeepLearningExamples RN50 v1.5", "A100", "tf32", 256, 8, 7248 / 8, "80 GB"),
    Published("NVIDIA DeepLearningExamples RN50 v1.5", "A100", "amp", 256, 1, 2470.0, "80 GB"),
    Published("NVIDIA DeepLearningExamples RN50 v1.5", "A100", "amp", 256, 8, 16621 / 8, "80 GB"),
    Published("PyTorch benchmarks/distributed/ddp", "V100", "fp32", 32, 1, 329.0),
    Published("PyTorch benchmarks/distributed/ddp", "V100", "fp32", 32, 16, 306.0),
    Published("MLPerf Training v4.0", "H100", "amp", None, 8, 7160.0, "MXNet+DALI NHWC", True),
    Published("MLPerf Training v4.0", "H200", "amp", None, 8, 7950.0, "MXNet+DALI NHWC", True),
)


def identify_gpu(device_name: str) -> GpuPeak | None:
    """Match a CUDA/NVML device name ("NVIDIA H100 80GB HBM3") to its datasheet peaks."""
    upper = device_name.upper()
    for tokens, peak in GPU_PEAKS:
        # whole words only: "A40" must not match an "RTX A4000"
        if all(re.search(rf"\b{t}\b", upper) for t in tokens):
            return peak
    return None


def precision_family(precision: str) -> str:
    return "amp" if precision.startswith("amp") else precision


def peak_flops(gpu: GpuPeak, precision: str) -> float | None:
    """The peak that bounds a run at `precision` (AMP's convolutions run in fp16/bf16)."""
    return {
        "fp32": gpu.fp32,
        "tf32": gpu.tf32,
        "amp-fp16": gpu.fp16,
        "amp-bf16": gpu.bf16,
    }[precision]


def flops_per_image(model: str, image_size: int) -> float | None:
    """Training FLOPs per image; known for ResNet-50, whose convolutions scale with pixel count."""
    if model != "resnet50":
        return None
    return RESNET50_FLOPS_PER_IMAGE * (image_size / RESNET50_IMAGE_SIZE) ** 2


def published_for(gpu: GpuPeak, precision: str) -> list[Published]:
    family = gpu.name.split()[0]
    wanted = precision_family(precision)
    return [p for p in PUBLISHED if p.gpu == family and p.precision == wanted]


def nearest_published(published: list[Published], gpus: int) -> Published | None:
    """The harness figure (not a ceiling) measured at the GPU count closest to `gpus`."""
    peers = [p for p in published if not p.ceiling]
    return min(peers, key=lambda p: (abs(p.gpus - gpus), -p.gpus), default=None)

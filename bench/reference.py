"""Published ResNet-50 training figures and GPU peak FLOP/s, to put a measurement in context.

Every figure below was re-read from its source (the `source` and `url` beside it) in 2026-11:
Lambda's deeplearning-benchmark CSVs (NVIDIA's DeepLearningExamples code in NGC containers,
synthetic data), the tables of NVIDIA's DeepLearningExamples PyTorch ResNet-50 v1.5 README, and
PyTorch's DDP benchmark. Lambda labels its non-AMP column "FP32"; NGC's PyTorch runs those
convolutions on TF32 tensor cores on Ampere and newer, so they are recorded as tf32 there.
MLPerf Training's ResNet-50 last ran in v4.0 (2024): mlcommons/training_policies
training_rules.adoc, "Appendix: Deprecated benchmarks", gives v4.0 as its latest version (commit
d73e20f1, read 2026-11-27). MLPerf publishes minutes to train, not img/s: the per-GPU rates below
are estimates from NVIDIA's single-node submission logs, kept as the realistic ceiling and marked
as such: the median `tracked_stats` throughput of epochs 2 on, five runs, divided by 8 GPUs (read
2026-11-27, this reading of v3.1's DGX H100 logs, training_results_v3.1 commit d06288b2
NVIDIA/results/eos_ngc23.09_mxnet/resnet, gives 56,438 / 8 = 7,055, the "about 7,000" below).
v4.0 has an 8x H200-SXM-141GB submission, mlcommons/training_results_v4.0 commit 6fe95437
NVIDIA/results/h200_ngc24.04_mxnet/resnet: 63,601 / 8 = 7,950 per GPU (read 2026-11-27). v4.0
has no B200 submission (no B200 path in that commit), so MLPerf has no B200 ResNet-50 result.
Lambda's results_v2 has 1-GPU ResNet-50 rows for H200 (bare metal, NGC 24.03, run 2024-08-02)
and B200 (a test host, NGC 25.06, added 2025-12-10) in pytorch-train-throughput-v2-fp16/-fp32.csv
(lambdal/deeplearning-benchmark commit aa5addb6, read 2026-11-27); batch sizes from each run's
benchmark.para. B200's AMP figure is barely above its "FP32" one (3,076 against 2,967) and level
with H200's 3,079, so read it as that host's result, not the chip's.

Peaks are NVIDIA's datasheet dense (no sparsity) numbers. Published figures differ from our
runs in batch size, software and data pipeline, so the report shows them as context, not as
pass/fail thresholds; only the FLOP bound is a hard limit (a result above it is a measurement
bug). `mfu` puts any img/s figure, measured or published, on the same scale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One ResNet-50 training image at 224x224: forward 4.1 G multiply-adds, backward about twice
# that, 2 FLOP per multiply-add: 3 * 4.1e9 * 2 = 24.6 GFLOP.
RESNET50_FLOPS_PER_IMAGE = 24.6e9
RESNET50_IMAGE_SIZE = 224

LAMBDA = "https://github.com/lambdal/deeplearning-benchmark/blob/master/pytorch/"
LAMBDA_V1_AMP = LAMBDA + "pytorch-train-throughput-fp16.csv"  # NGC 22.10; batch: *-bs-*.csv
LAMBDA_V1_TF32 = LAMBDA + "pytorch-train-throughput-fp32.csv"
LAMBDA_V2_AMP = LAMBDA + "pytorch-train-throughput-v2-fp16.csv"  # results_v2, NGC 24.x
LAMBDA_V2_TF32 = LAMBDA + "pytorch-train-throughput-v2-fp32.csv"
DLE = (
    "https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Classification/"
    "ConvNets/resnet50v1.5/README.md#training-performance-results"
)  # pytorch-21.03 NGC container
DDP_BENCH = "https://github.com/pytorch/pytorch/tree/main/benchmarks/distributed/ddp"
MLPERF = "https://github.com/mlcommons/training_results_v3.1 (NVIDIA DGX H100, resnet)"
MLPERF_V40_H200 = (
    "https://github.com/mlcommons/training_results_v4.0/tree/main/NVIDIA/results/"
    "h200_ngc24.04_mxnet/resnet"
)  # result_0..4.txt; system: NVIDIA/systems/h200_ngc24.04_mxnet.json (8x H200-SXM5-141GB)


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
    (("B200",), GpuPeak("B200", 75e12, 1100e12, 2250e12, 2250e12)),
    (("H200", "NVL"), GpuPeak("H200 NVL", 60e12, 417.5e12, 835e12, 835e12)),
    (("H200",), GpuPeak("H200 SXM", 67e12, 494.7e12, 989.4e12, 989.4e12)),
    (("H100", "NVL"), GpuPeak("H100 NVL", 60e12, 417.5e12, 835e12, 835e12)),
    (("H100", "PCIE"), GpuPeak("H100 PCIe", 51e12, 378e12, 756e12, 756e12)),
    (("H100",), GpuPeak("H100 SXM", 67e12, 494.7e12, 989.4e12, 989.4e12)),
    (("A100",), GpuPeak("A100", 19.5e12, 156e12, 312e12, 312e12)),
    (("A40",), GpuPeak("A40", 37.4e12, 74.8e12, 149.7e12, 149.7e12)),
    # GeForce: fp16/bf16 with fp32 accumulation (what AMP uses) at half the fp16-accumulate rate
    (("RTX", "4090"), GpuPeak("RTX 4090", 82.6e12, 82.6e12, 165.2e12, 165.2e12)),
    (("V100", "PCIE"), GpuPeak("V100 PCIe", 14e12, None, 112e12, None)),
    (("V100",), GpuPeak("V100 SXM2", 15.7e12, None, 125e12, None)),
)


@dataclass(frozen=True)
class Published:
    source: str
    gpu: str  # the GpuPeak.name it was measured on ("H100 SXM", "A100", ...)
    precision: str  # "fp32", "tf32" or "amp"
    batch_per_gpu: int | None  # None: the source does not say
    gpus: int
    images_per_s_per_gpu: float
    note: str = ""
    ceiling: bool = False  # MLPerf: a tuned framework and input pipeline, the realistic ceiling
    layout: str = "nchw"  # activation memory format of the run
    url: str = ""  # where the figure can be read


def _lambda(
    gpu: str, precision: str, batch: int | None, gpus: int, total: float, url: str, note: str
) -> Published:
    source = "Lambda deeplearning-benchmark"
    return Published(source, gpu, precision, batch, gpus, total / gpus, note, url=url)


def _dle(gpu: str, precision: str, gpus: int, per_gpu: float, note: str) -> Published:
    return Published(
        "NVIDIA DeepLearningExamples RN50 v1.5", gpu, precision, None, gpus, per_gpu, note, url=DLE
    )


PUBLISHED: tuple[Published, ...] = (
    # Lambda results_v2 (H100 SXM5 on Lambda On-Demand; batch not in the CSV)
    _lambda("H100 SXM", "amp", None, 1, 2791, LAMBDA_V2_AMP, "SXM5, results_v2"),
    _lambda("H100 SXM", "amp", None, 8, 22059, LAMBDA_V2_AMP, "SXM5, results_v2"),
    _lambda("H100 SXM", "tf32", None, 1, 1895, LAMBDA_V2_TF32, "SXM5, results_v2 ('FP32')"),
    _lambda("H100 SXM", "tf32", None, 8, 14969, LAMBDA_V2_TF32, "SXM5, results_v2 ('FP32')"),
    _lambda("H100 PCIe", "amp", None, 1, 1976, LAMBDA_V2_AMP, "results_v2"),
    _lambda("H100 PCIe", "tf32", None, 1, 1248, LAMBDA_V2_TF32, "results_v2 ('FP32')"),
    # Lambda results_v2, read 2026-11-27 at lambdal/deeplearning-benchmark commit aa5addb6: rows
    # LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2 and LambdaOD_test_1xB200_192GB_129-213-83-251_v2;
    # batch per GPU from results_v2/<row>/PyTorch_resnet50_{AMP,FP32}/benchmark.para (GLOBAL_BATCH,
    # GPU 1; B200's also in pytorch/csv_v1_v2/pytorch-train-bs-fp16/fp32.csv)
    _lambda("H200 SXM", "amp", 2560, 1, 3079, LAMBDA_V2_AMP, "141GB, bare metal, NGC 24.03, v2"),
    _lambda("H200 SXM", "tf32", 1280, 1, 2259, LAMBDA_V2_TF32, "141GB, NGC 24.03, v2 ('FP32')"),
    _lambda("B200", "amp", 3328, 1, 3076, LAMBDA_V2_AMP, "192GB test host, NGC 25.06, v2"),
    _lambda("B200", "tf32", 1664, 1, 2967, LAMBDA_V2_TF32, "192GB test, NGC 25.06, v2 ('FP32')"),
    # Lambda 2023 (NGC 22.10); batch per GPU from pytorch-train-bs-fp16/fp32.csv
    _lambda("A100", "amp", 1280, 1, 1582, LAMBDA_V1_AMP, "80GB SXM4, NGC 22.10"),
    _lambda("A100", "amp", 1280, 8, 11439, LAMBDA_V1_AMP, "80GB SXM4, NGC 22.10"),
    _lambda("A100", "tf32", 640, 1, 1066, LAMBDA_V1_TF32, "80GB SXM4, NGC 22.10 ('FP32')"),
    _lambda("A100", "tf32", 640, 8, 7397, LAMBDA_V1_TF32, "80GB SXM4, NGC 22.10 ('FP32')"),
    _lambda("RTX 4090", "amp", 448, 1, 1301, LAMBDA_V1_AMP, "NGC 22.10"),
    _lambda("RTX 4090", "tf32", 224, 1, 721, LAMBDA_V1_TF32, "NGC 22.10 ('FP32')"),
    # NVIDIA DeepLearningExamples, DGX A100 80GB, pytorch-21.03 (NCHW then)
    _dle("A100", "tf32", 1, 938.0, "DGX A100 80GB"),
    _dle("A100", "tf32", 8, 7248 / 8, "DGX A100 80GB"),
    _dle("A100", "amp", 1, 2470.0, "DGX A100 80GB"),
    _dle("A100", "amp", 8, 16621 / 8, "DGX A100 80GB"),
    _dle("V100 SXM2", "fp32", 1, 367.0, "DGX-1 16GB"),
    _dle("V100 SXM2", "amp", 1, 1200.0, "DGX-1 16GB"),
    Published(
        "PyTorch benchmarks/distributed/ddp", "V100 SXM2", "fp32", 32, 1, 329.0, url=DDP_BENCH
    ),
    Published(
        "PyTorch benchmarks/distributed/ddp", "V100 SXM2", "fp32", 32, 16, 306.0, url=DDP_BENCH
    ),
    Published(
        "MLPerf Training v3.0/v3.1 (estimate)",
        "H100 SXM",
        "amp",
        None,
        8,
        7000.0,
        "MXNet + DALI; per-GPU rate derived from submission logs, about",
        ceiling=True,
        layout="nhwc",
        url=MLPERF,
    ),
    # v4.0, 2024-04 runs: 5 x 35 epochs, global batch 3200 (d_batch_size 400); the median
    # tracked_stats throughput of epochs 2-35 is 63,601 img/s for 8 GPUs (read 2026-11-27)
    Published(
        "MLPerf Training v4.0 (estimate)",
        "H200 SXM",
        "amp",
        400,
        8,
        7950.0,
        "MXNet + DALI, NGC 24.04; per-GPU rate derived from submission logs, about",
        ceiling=True,
        layout="nhwc",
        url=MLPERF_V40_H200,
    ),
)


def identify_gpu(device_name: str) -> GpuPeak | None:
    """Match a CUDA/NVML device name ("NVIDIA H100 80GB HBM3") to its datasheet peaks."""
    upper = device_name.upper()
    for tokens, peak in GPU_PEAKS:
        # whole words only: "A40" must not match an "RTX A4000"
        if all(re.search(rf"\b{t}\b", upper) for t in tokens):
            return peak
    return None


def peak_flops(gpu: GpuPeak, precision: str) -> float | None:
    """The peak that bounds a run at `precision` (AMP's convolutions run in fp16/bf16)."""
    return {
        "fp32": gpu.fp32,
        "tf32": gpu.tf32,
        "amp-fp16": gpu.fp16,
        "amp-bf16": gpu.bf16,
        "amp": gpu.bf16 or gpu.fp16,  # a published AMP figure: bf16 where the GPU has it
    }[precision]


def flops_per_image(model: str, image_size: int) -> float | None:
    """Training FLOPs per image; known for ResNet-50, whose convolutions scale with pixel count."""
    if model != "resnet50":
        return None
    return RESNET50_FLOPS_PER_IMAGE * (image_size / RESNET50_IMAGE_SIZE) ** 2


def mfu(
    images_per_s_per_gpu: float,
    gpu: GpuPeak,
    precision: str,
    model: str = "resnet50",
    image_size: int = RESNET50_IMAGE_SIZE,
) -> float | None:
    """Model FLOP utilisation: img/s x training FLOPs per image / the precision's peak FLOP/s.

    `precision` is a run's ("amp-bf16") or a published family ("amp", "tf32"). None where the
    model's FLOPs or the GPU's peak at that precision are unknown.
    """
    flops = flops_per_image(model, image_size)
    peak = peak_flops(gpu, precision)
    if flops is None or not peak:
        return None
    return images_per_s_per_gpu * flops / peak


def published_for(gpu: GpuPeak, precision: str) -> list[Published]:
    wanted = "amp" if precision.startswith("amp") else precision  # amp-bf16, amp-fp16: amp
    return [p for p in published_on(gpu) if p.precision == wanted]


def published_on(gpu: GpuPeak) -> list[Published]:
    """Every published figure measured on this GPU model."""
    return [p for p in PUBLISHED if p.gpu == gpu.name]


def nearest_published(published: list[Published], gpus: int) -> Published | None:
    """The harness figure (not a ceiling) measured at the GPU count closest to `gpus`."""
    peers = [p for p in published if not p.ceiling]
    return min(peers, key=lambda p: (abs(p.gpus - gpus), -p.gpus), default=None)

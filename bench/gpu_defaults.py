"""The defaults an expert would choose for a GPU, from what the GPU is (a pure function).

bench.config asks `gpu_defaults` for the knobs a user did not set on a GPU sweep; every chosen
value is a column of each result row (precision, channels_last, compile, batch_per_gpu) and
every knob stays sweepable (`--memory-format nchw,channels_last`, `--compile off,on`, ...).

Why these values (ResNet-50 at 224², synthetic data, one H100 80GB HBM3, torch 2.11.0+cu130):
these defaults (amp-bf16, channels_last, compile, batch 256) gave 5,577 img/s under DDP and 5,643
under Horovod on one GPU, against 5,634 for a plain loop with the same knobs
(docs/results/2026-11-26-h100); the same without compile (eager) 3,854-3,872, where the profile
shows batch norm's kernels taking 43 % of the GPU's time, which Inductor fuses
(docs/results/2026-11-25-h100). An older tree on the same GPU gave 2,109 img/s for
amp-bf16 NCHW at batch 128 and 3,146-3,623 with channels_last. Tensor cores want NHWC activations
(cuDNN's NCHW path transposes around every convolution), so channels_last goes with any GPU that
has them (compute capability 7.0, Volta, and newer). bf16 needs Ampere (8.0); before it, fp16
with a GradScaler. torch.compile's gain was measured on Hopper; Inductor's generated kernels
target Ampere and newer best, so it is on from 8.0 and left off (one flag away) before.
"""

from __future__ import annotations

from dataclasses import dataclass

VOLTA = (7, 0)  # first tensor cores (fp16)
AMPERE = (8, 0)  # bf16 and TF32 tensor cores

# Per-GPU batch by memory class (ResNet-50, 224², AMP, channels_last; peak allocated memory at 256
# was 11.5 GB with compile and 11.9 GB without on the H100, docs/results/2026-11-25-h100): the
# batch NVIDIA's DeepLearningExamples use for A100 AMP, so the figures compare with theirs (384
# ran 2.2 % faster in a plain loop on the H100, docs/results/2026-11-26-h100; `--batch-size`
# sweeps it); half of it on 16 GB cards (V100 16 GB, T4); a quarter on smaller ones. The
# thresholds sit below the marketed sizes: a "40 GB" A100 reports 42.4 GB (decimal) and a T4 15.8
# GB.
BATCH_BY_MEMORY_GB: tuple[tuple[float, int], ...] = ((38.0, 256), (15.0, 128), (0.0, 64))


@dataclass(frozen=True)
class GpuDescription:
    """What bench.machine reports of a GPU."""

    name: str
    capability: tuple[int, int]  # CUDA compute capability, (9, 0) for H100
    memory_gb: float  # total device memory, decimal GB


@dataclass(frozen=True)
class GpuDefaults:
    precision: str
    channels_last: bool
    compile: bool
    batch_per_gpu: int
    # why each value was chosen, by the knob it fills (bench.spec / bench.config field names):
    # printed when a sweep starts and stated in the report for every default the user kept
    reasons: dict[str, str]


def batch_for_memory(memory_gb: float) -> int:
    return next(batch for floor, batch in BATCH_BY_MEMORY_GB if memory_gb >= floor)


def gpu_defaults(gpu: GpuDescription) -> GpuDefaults:
    tensor_cores = gpu.capability >= VOLTA
    ampere = gpu.capability >= AMPERE
    cc = f"{gpu.capability[0]}.{gpu.capability[1]}"
    precision = "amp-bf16" if ampere else "amp-fp16" if tensor_cores else "fp32"
    batch = batch_for_memory(gpu.memory_gb)
    has = "bf16" if ampere else "fp16 tensor cores, no bf16" if tensor_cores else "no tensor cores"
    reasons = {
        "precision": f"precision {precision}: compute capability {cc} has {has}",
        "channels_last": f"memory format {'channels_last' if tensor_cores else 'nchw'}: "
        + ("tensor cores run NHWC convolutions natively" if tensor_cores else "no tensor cores"),
        "compile": f"compile {'on' if ampere else 'off'}: "
        + ("faster on Ampere and newer" if ampere else "gain not established before Ampere"),
        "batch_size": f"batch {batch} per GPU: {gpu.memory_gb:.0f} GB of memory",
    }
    return GpuDefaults(precision, tensor_cores, ampere, batch, reasons)

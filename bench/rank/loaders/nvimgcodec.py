"""The nvImageCodec path: the GPU's hardware JPEG decoder, then the batched augment.

The same pipeline as `nvjpeg` (workers read file bytes, a producer thread decodes and augments
the next batches on a side stream: nvjpeg.decoded_batches), with NVIDIA nvImageCodec's decoder
in place of torchvision's. On GPUs that have them (A100, H100 and their kind) nvImageCodec decodes
on the NVJPG hardware engines, which leave the SMs to training: torchvision's nvJPEG decode runs
its kernels on the SMs beside the training step's (docs/results/2026-11-26-h100).

Backends (nvImageCodec 0.9.0, checked 2026-11-27): HW_GPU_ONLY is the hardware decoder, which
takes baseline single-scan JPEGs in 4:4:4, 4:2:2, 4:2:0, 4:4:0 and grey (nvjpeg.h's
NVJPEG_BACKEND_HARDWARE note; NVIDIA/nvImageCodec extensions/nvjpeg/hw_decoder.cpp canDecode);
HYBRID_CPU_GPU is nvJPEG's CUDA decoder (extensions/nvjpeg/cuda_decoder.cpp) and CPU_ONLY
libjpeg-turbo's. One decoder allowed several backends tries them in that order for each image
(nvjpeg_ext.cpp's priorities 100, 200, 300); this loader instead runs the hardware decoder alone
first and the others on the files it returned None for (GPU_STAGES), so progressive and CMYK
files, which the hardware refuses, are still decoded. GPU_ONLY is not a JPEG backend: only the
JPEG 2000 and TIFF decoders register as GPU_ONLY. Without their libraries, asking for it alone
fails with status 7 (NVIMGCODEC_STATUS_ARCH_MISMATCH, "Requested backends not among available
processors", src/image_generic_codec.h); with them (nvidia-nvjpeg2k-cu13, nvidia-nvtiff-cu13) it
makes a decoder that returns None for every JPEG (one H200, docs/results/2026-11-27-h200). A file
no decoder takes is read with PIL.

`Decoder.decode` releases the GIL, and returns once the hardware decode is queued on the given
CUDA stream (python/decoder.cpp, hw_decoder.cpp). The decoded images are HWC RGB uint8 in device
memory owned by nvImageCodec's Image objects; `torch.as_tensor` wraps them without a copy and
keeps each Image alive while the tensor lives.

On a CPU device the same code runs with the CPU_ONLY backend (nvImageCodec's
NVIMGCODEC_DEVICE_CPU_ONLY device id): that is how the tests exercise it; the loader choice
refuses `nvimgcodec` on CPU sweeps (bench.loader_support).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from bench.rank.loaders.nvjpeg import Batch, decoded_batches, pil_decode, probe_jpeg
from bench.rank.loaders.nvjpeg import queue_depth as queue_depth
from bench.shared.loaders import LoaderRequest

# Distribution and module: pip install nvidia-nvimgcodec-cu13 nvidia-nvjpeg (the CUDA 13 build
# and the nvJPEG library its GPU decoders load; PyPI, checked 2026-11-27)
MODULE = "nvidia.nvimgcodec"
# Decoders tried one after the other, each on the files the ones before it returned None for. The
# hardware decoder alone, not in one decoder with the others: on one H200 (docs/results/
# 2026-11-27-h200, decode_probe.py) HW_GPU_ONLY decoded 18,105 img/s and one decoder allowed
# HW_GPU_ONLY, HYBRID_CPU_GPU and CPU_ONLY 13,821 img/s on the same files, all of which the
# hardware takes.
GPU_STAGES = (("HW_GPU_ONLY",), ("HYBRID_CPU_GPU", "CPU_ONLY"))
CPU_STAGES = (("CPU_ONLY",),)


def decode_in_stages(
    decoders: list[Any], files: list[np.ndarray], cuda_stream: int
) -> list[Any | None]:
    """Each file decoded by the first of `decoders` (nvImageCodec Decoders) that returns an
    image for it; None where none does."""
    images: list[Any | None] = [None] * len(files)
    left = list(range(len(files)))
    for decoder in decoders:
        if not left:
            break
        decoded = decoder.decode([files[i] for i in left], cuda_stream=cuda_stream)
        for i, image in zip(left, decoded, strict=True):
            images[i] = image
        left = [i for i in left if images[i] is None]
    return images


class HardwareJpegDecoder:
    """Batched decode with nvImageCodec on `device`: the hardware decoder, then nvJPEG's CUDA
    decoder and the CPU's for the files it refuses (on CPU: the CPU decoder), then PIL.
    `threads` caps nvImageCodec's own CPU threads per decoder (it starts one per core
    otherwise)."""

    def __init__(
        self, device: torch.device, threads: int, stages: tuple[tuple[str, ...], ...] = ()
    ) -> None:
        codec = importlib.import_module(MODULE)
        self.device = device
        if device.type == "cuda":
            device_id = device.index if device.index is not None else torch.cuda.current_device()
            self.stages = stages or GPU_STAGES
        else:
            device_id, self.stages = codec.NVIMGCODEC_DEVICE_CPU_ONLY, stages or CPU_STAGES
        self.decoders = [
            codec.Decoder(
                device_id=device_id,
                max_num_cpu_threads=max(1, threads),
                backends=[codec.Backend(getattr(codec.BackendKind, kind)) for kind in kinds],
            )
            for kinds in self.stages
        ]

    def __call__(self, encoded: list[torch.Tensor]) -> list[torch.Tensor]:
        cuda = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device).cuda_stream if cuda else 0
        decoded = decode_in_stages(self.decoders, [data.numpy() for data in encoded], stream)
        images = []
        for data, image in zip(encoded, decoded, strict=True):
            if image is None:  # no decoder took it (not a file nvImageCodec reads)
                images.append(pil_decode(data).to(self.device))
            elif cuda:
                images.append(torch.as_tensor(image, device=self.device).permute(2, 0, 1))
            else:
                images.append(torch.from_numpy(np.asarray(image)).permute(2, 0, 1))
        return images


def batches(request: LoaderRequest) -> Iterator[Batch]:
    """nvImageCodec's batched decode, at most `--workers` CPU threads of its own."""
    return decoded_batches(request, HardwareJpegDecoder(request.device, request.workers))


def gpu_decode_problem() -> str:
    """Why nvImageCodec cannot decode a JPEG on this machine's GPU, or "" (run in a child
    process by bench.loader_support before launch: it initialises CUDA)."""
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    try:
        importlib.import_module(MODULE)
    except ImportError as exc:
        return (
            f"nvImageCodec is not installed ({exc}): pip install nvidia-nvimgcodec-cu"
            f"{(torch.version.cuda or '13').split('.')[0]} nvidia-nvjpeg"
        )
    data = probe_jpeg(64, 48)
    try:
        decoder = HardwareJpegDecoder(torch.device("cuda"), 1)
        decoded = decode_in_stages(decoder.decoders, [data.numpy()], 0)
    except RuntimeError as exc:
        return f"nvImageCodec cannot decode JPEGs on this GPU: {exc}"
    if decoded[0] is None or tuple(decoded[0].shape) != (48, 64, 3):
        return "nvImageCodec's GPU decoders returned nothing for a 64 x 48 JPEG"
    return ""

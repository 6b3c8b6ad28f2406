"""Which input loader a sweep uses (`--loader`), decided on the controller before launch.

`torch` (DataLoader workers, CPU decode) runs everywhere. `nvimgcodec` (nvImageCodec's batched
decode on the GPU's JPEG engines) and `nvjpeg` (torchvision's batched GPU decode), both followed by
the GPU augmentation, need a CUDA device and their decoder working on it (nvImageCodec
installed; a torchvision whose compiled ops load), checked by decoding a tiny JPEG on the GPU in
a child process (so the controller holds no CUDA context during the sweep). `dali` needs a CUDA
device and an installed `nvidia-dali-cudaXY0` wheel whose CUDA major matches torch's. A loader
that cannot run is refused with its reason before anything launches.

Without `--loader`, a GPU sweep on real data takes the first runnable of DEFAULT_ORDER (DALI's
fused GPU pipeline, then the GPU decoders, the hardware one first, then CPU workers: the order
NVIDIA's published ResNet-50 harnesses rank them in; the loader-only rate in each row shows what
this machine gives), a CPU sweep `torch`. Synthetic data has no loader: its rows say NO_LOADER.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from collections.abc import Callable, Sequence

from bench.launcher_kinds import TORCH_PACKAGE, launcher_kind
from bench.launchers.sites import probe_json
from bench.shared.loaders import LOADERS, TF_DATA
from bench.spec import NO_LOADER, SYNTHETIC

DEFAULT_ORDER = ("dali", "nvimgcodec", "nvjpeg", "torch")
_DALI_WHEEL = re.compile(r"^nvidia[-_]dali[-_](?:(?:nightly|weekly)[-_])?cuda(\d+)$")
GPU_DECODE_PROBE_TIMEOUT_S = 180.0
# the loaders that decode on the GPU, each checked by decoding a JPEG there (the decoder's name)
GPU_DECODERS = {"nvimgcodec": "nvImageCodec", "nvjpeg": "nvJPEG"}


def dali_cuda_majors() -> tuple[int, ...]:
    """CUDA majors of the installed DALI wheels (nvidia-dali-cuda120 -> 12)."""
    majors = set()
    for dist in importlib.metadata.distributions():
        match = _DALI_WHEEL.match((dist.name or "").lower())
        if match:
            majors.add(int(match[1]) // 10)
    return tuple(sorted(majors))


def torch_cuda_major() -> int | None:
    import torch

    return int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None


@functools.cache
def gpu_decode_problem(loader: str = "nvjpeg") -> str:
    """Why `loader` (nvjpeg: torchvision, nvimgcodec: nvImageCodec) cannot decode JPEGs on this
    machine's GPU, or "" (child process)."""
    code = (
        f"import json; from bench.rank.loaders.{loader} import gpu_decode_problem as p; "
        "print(json.dumps({'problem': p()}))"
    )
    found = probe_json([sys.executable, "-c", code], GPU_DECODE_PROBE_TIMEOUT_S)
    if isinstance(found, str):
        return f"the GPU decode test failed: {found}"
    return str(found["problem"])


def loader_problem(
    loader: str,
    device: str,
    torch_major: Callable[[], int | None] | None = None,
    dali_majors: Callable[[], Sequence[int]] | None = None,
    decode_problem: Callable[[str], str] | None = None,
) -> str:
    """Why `loader` cannot run a sweep on `device` here, or "" if it can. Tests state a
    machine's facts through the detection functions (default: this machine's)."""
    if loader == "torch" or loader == TF_DATA.name:  # tf.data: wherever TensorFlow is
        return ""
    if loader not in GPU_DECODERS and loader != "dali":
        return f"unknown loader {loader!r}: choose from {', '.join(LOADERS)}"
    if device != "cuda":
        decoder = GPU_DECODERS.get(loader, "DALI's pipeline")
        return f"{decoder} decodes on the GPU; this sweep runs on CPU"
    if loader in GPU_DECODERS:
        return (decode_problem or gpu_decode_problem)(loader)
    majors = (dali_majors or dali_cuda_majors)()
    torch_cuda = (torch_major or torch_cuda_major)()
    if not majors:
        wheel = f"nvidia-dali-cuda{torch_cuda}0" if torch_cuda else "nvidia-dali-cuda130"
        return f"NVIDIA DALI is not installed (pip install {wheel}, matching torch's CUDA)"
    if torch_cuda not in majors:
        return (
            f"the installed DALI is built for CUDA {'/'.join(map(str, majors))} but torch "
            f"for CUDA {torch_cuda}: install nvidia-dali-cuda{torch_cuda}0"
        )
    return ""


def resolve_loaders(
    requested: Sequence[str] | None,
    data: str,
    device: str,
    problem: Callable[[str, str], str] = loader_problem,
) -> tuple[str, ...]:
    """The loaders a sweep runs: as requested, NO_LOADER for synthetic data, else the default
    (the first runnable of DEFAULT_ORDER on a GPU, torch on CPU). Refusals are admission's."""
    if data == SYNTHETIC:
        return tuple(requested) if requested else (NO_LOADER,)
    if requested:
        return tuple(requested)
    if device != "cuda":
        return ("torch",)
    return (next(name for name in DEFAULT_ORDER if not problem(name, device)),)


def loader_errors(
    loaders: Sequence[str],
    data: str,
    device: str,
    problem: Callable[[str, str], str] = loader_problem,
    launchers: Sequence[str] = (),
) -> list[str]:
    """Every reason the sweep's loaders cannot run, as --loader messages. --loader picks the
    torch launchers' pipeline (tf reads --data through tf.data whatever it says), so tf's own
    loader is refused in a sweep with torch launchers."""
    if data == SYNTHETIC:
        if tuple(loaders) != (NO_LOADER,):
            return [
                "--loader: synthetic data is made on the device, there is nothing to load "
                "(give --data DIR to compare loaders)"
            ]
        return []
    errors = []
    for loader in loaders:
        framework = LOADERS[loader].framework if loader in LOADERS else TORCH_PACKAGE
        others = [x for x in launchers if launcher_kind(x).framework != framework]
        if framework != TORCH_PACKAGE and others:
            errors.append(
                f"--loader {loader}: it feeds {framework} ranks only, and {', '.join(others)} "
                f"cannot read it (tf reads --data through {loader} whatever --loader says)"
            )
            continue
        reason = problem(loader, device)
        if reason:
            errors.append(f"--loader {loader}: {reason}")
    return errors

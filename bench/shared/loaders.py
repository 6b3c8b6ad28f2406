"""The `--loader` registry: one `Loader` per name, torch-free, so the controller lists and checks
the names (bench.spec makes the option from it) without importing the rank side. A loader's module
(bench.rank.loaders.<module>) is imported when a rank first uses it; the recipe every loader
follows is declared here once.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Batch = tuple["torch.Tensor", "torch.Tensor"]
RANK_LOADERS = "bench.rank.loaders"


@dataclass(frozen=True)
class LoaderRequest:
    """What a rank asks of its input: every loader's `batches` takes this and nothing else.
    bench.rank.worker.loader_request builds it from the run's spec and the rank's place."""

    root: str  # --data: an ImageFolder root, or "synthetic" (made on the device, no loader)
    batch: int  # images per batch this process consumes (DataParallel: all its GPUs' share)
    image_size: int  # square crop size in pixels
    num_classes: int  # classes of the model's output (synthetic labels are drawn below it)
    workers: int  # --workers: DataLoader worker processes (DALI: CPU threads) per rank
    rank: int  # global rank: which shard this rank reads
    world_size: int  # ranks over all nodes: how many shards
    device: torch.device  # where the batches are delivered
    memory_format: torch.memory_format  # layout of the delivered images (channels_last or not)
    seed: int  # the run's seed: one shuffle order on every rank, augmentations per rank


@dataclass(frozen=True)
class Loader:
    """One `--loader` choice. Its module (in this package) defines `batches(request)`, the endless
    iterator of (images, labels) on the device, and `queue_depth(workers)`, the batches it holds
    ready before it is asked (drained before the loader is timed alone)."""

    name: str
    module: str  # the module of bench.rank.loaders that builds it ("": the rank builds it itself)
    summary: str  # what it does, for the --loader help
    framework: str = "torch"  # the framework whose ranks read it (a launcher kind's framework)

    def _module(self) -> ModuleType:
        if not self.module:
            raise ValueError(f"the {self.name} loader feeds {self.framework} ranks only")
        return importlib.import_module(f"{RANK_LOADERS}.{self.module}")

    def batches(self, request: LoaderRequest) -> Iterator[Batch]:
        batches: Iterator[Batch] = self._module().batches(request)
        return batches

    def queue_depth(self, workers: int) -> int:
        return int(self._module().queue_depth(workers))


# The recipe every loader follows (augment, DALI, tf.data): random resized crop of area SCALE and
# aspect RATIO, flip, normalisation by ImageNet's per-channel mean and standard deviation.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SCALE = (0.08, 1.0)
RATIO = (3 / 4, 4 / 3)

# tf's own pipeline (the tf launcher reads --data only through it)
TF_DATA = Loader("tfdata", "", "tf.data, for the tf launcher", framework="tensorflow")
LOADERS: dict[str, Loader] = {
    loader.name: loader
    for loader in (
        Loader("torch", "torch_loader", "DataLoader workers decode on the CPU"),
        Loader("nvimgcodec", "nvimgcodec", "nvImageCodec decodes on the GPU's JPEG engines"),
        Loader("nvjpeg", "nvjpeg", "torchvision decodes and augments on the GPU"),
        Loader("dali", "dali", "NVIDIA DALI"),
        TF_DATA,
    )
}


def loader_named(name: str) -> Loader:
    """The registered loader called `name` (a ValueError naming the choices for any other)."""
    try:
        return LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown loader {name!r}: choose from {', '.join(LOADERS)}") from None

"""The torch DataLoader path, and the sharding and DataLoader settings every torch-fed loader
shares.

Workers decode (PIL) and augment on the CPU and hand over uint8 batches: a quarter of the bytes
of float32 through pinned memory and PCIe, as NVIDIA's DeepLearningExamples do; conversion to
float and normalisation happen on the device. Workers persist across epochs and each keeps
PREFETCH_FACTOR batches ready. Each worker runs one torch thread (PIL decodes single-threaded;
more threads only contend with the other workers and the training process).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from bench.rank.loaders.augment import normalize_
from bench.shared.lifeline import die_with_parent
from bench.shared.loaders import LoaderRequest
from bench.shared.models import import_submodule

Batch = tuple[torch.Tensor, torch.Tensor]
PREFETCH_FACTOR = 4  # batches ready per worker: uint8 224 px x 128 = 19 MB each


def distributed_sampler(
    dataset: torch.utils.data.Dataset[Any], rank: int, world_size: int, seed: int
) -> torch.utils.data.DistributedSampler[Any]:
    """Disjoint shards over all ranks of all nodes (global rank / world size); every rank
    shuffles the whole list with the same seed + epoch, so the shards stay disjoint and the
    order is new each epoch and the same in every run with that seed."""
    return torch.utils.data.DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )


def _one_thread_per_worker(_: int) -> None:
    die_with_parent()  # a worker outlives no killed rank
    torch.set_num_threads(1)


def dataloader_settings(workers: int, pin_memory: bool) -> dict[str, Any]:
    """DataLoader keyword arguments for `workers` worker processes per rank."""
    settings: dict[str, Any] = {"num_workers": workers, "pin_memory": pin_memory}
    if workers > 0:
        settings |= {
            "persistent_workers": True,  # no worker restart (and re-import) every epoch
            "prefetch_factor": PREFETCH_FACTOR,
            "worker_init_fn": _one_thread_per_worker,
        }
    return settings


def queue_depth(workers: int) -> int:
    """Batches a DataLoader may hold ready: what a loader-only measurement drains first."""
    return workers * PREFETCH_FACTOR if workers > 0 else 0


def epochs(
    loader: torch.utils.data.DataLoader[Any], sampler: torch.utils.data.DistributedSampler[Any]
) -> Iterator[Any]:
    """The loader's batches epoch after epoch, reshuffled each epoch (set_epoch)."""
    for epoch in itertools.count():
        sampler.set_epoch(epoch)
        yield from loader


def no_full_batch(request: LoaderRequest, images: int) -> ValueError:
    return ValueError(
        f"{request.root}: {images} images give no full batch of {request.batch} on each of "
        f"{request.world_size} ranks"
    )


def sharded_epochs(
    dataset: torch.utils.data.Dataset[Any], request: LoaderRequest, pin_memory: bool, **options: Any
) -> Iterator[Any]:
    """The rank's shard of `dataset` (distributed_sampler) in full batches through DataLoader
    workers, epoch after epoch; refused when the shard holds no full batch."""
    sampler = distributed_sampler(dataset, request.rank, request.world_size, request.seed)
    settings = dataloader_settings(request.workers, pin_memory)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=request.batch, sampler=sampler, drop_last=True, **options, **settings
    )
    if len(loader) == 0:
        raise no_full_batch(request, len(dataset))
    return epochs(loader, sampler)


def batches(request: LoaderRequest) -> Iterator[Batch]:
    """Each rank reads its shard of an ImageFolder through DataLoader workers."""
    device = request.device
    datasets = import_submodule("datasets")
    transforms = import_submodule("transforms")
    dataset = datasets.ImageFolder(
        request.root,
        # PIL explicitly: the default loader asks torchvision's package __init__ for the image
        # backend, which bench.shared.models may have had to skip (no compiled ops)
        loader=datasets.folder.pil_loader,
        transform=transforms.Compose(
            [
                transforms.RandomResizedCrop(request.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor(),  # uint8 CHW
            ]
        ),
    )
    for images, labels in sharded_epochs(dataset, request, pin_memory=device.type == "cuda"):
        images = images.to(device, non_blocking=True).float()
        yield (
            normalize_(images).contiguous(memory_format=request.memory_format),
            labels.to(device, non_blocking=True),
        )

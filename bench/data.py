"""Input batches: synthetic (the default, like the reference harnesses) or an ImageFolder.

Both are endless iterators of (images, labels) already on the training device in the run's
memory format. The worker times `next()` on them separately from the step, so a starved GPU
shows up as data wait rather than as slow training.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bench.models import import_submodule
from bench.plan import SYNTHETIC

Batch = tuple[torch.Tensor, torch.Tensor]


def synthetic_batches(
    batch: int,
    image_size: int,
    num_classes: int,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
) -> Iterator[Batch]:
    """One random batch made once on the device and reused: measures the model, not input."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, image_size, image_size, generator=generator)
    labels = torch.randint(0, num_classes, (batch,), generator=generator)
    images = images.to(device).contiguous(memory_format=memory_format)
    labels = labels.to(device)
    while True:
        yield images, labels


def imagefolder_batches(
    root: str,
    batch: int,
    image_size: int,
    workers: int,
    rank: int,
    world_size: int,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
) -> Iterator[Batch]:
    """Each rank reads its shard of an ImageFolder (DistributedSampler), epoch after epoch."""
    datasets = import_submodule("datasets")
    transforms = import_submodule("transforms")
    dataset = datasets.ImageFolder(
        root,
        # PIL explicitly: the default loader asks torchvision's package __init__ for the image
        # backend, which bench.models may have had to skip (no compiled ops)
        loader=datasets.folder.pil_loader,
        transform=transforms.Compose(
            [
                transforms.RandomResizedCrop(image_size),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
            ]
        ),
    )
    sampler = torch.utils.data.DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=workers > 0,
    )
    if len(loader) == 0:
        raise ValueError(
            f"{root}: {len(dataset)} images give no full batch of {batch} on each of "
            f"{world_size} ranks"
        )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for images, labels in loader:
            yield (
                images.to(device, non_blocking=True).contiguous(memory_format=memory_format),
                labels.to(device, non_blocking=True),
            )
        epoch += 1


def make_batches(
    data: str,
    batch: int,
    image_size: int,
    num_classes: int,
    workers: int,
    rank: int,
    world_size: int,
    device: torch.device,
    memory_format: torch.memory_format,
    seed: int,
) -> Iterator[Batch]:
    if data == SYNTHETIC:
        return synthetic_batches(batch, image_size, num_classes, device, memory_format, seed + rank)
    return imagefolder_batches(
        data, batch, image_size, workers, rank, world_size, device, memory_format, seed
    )

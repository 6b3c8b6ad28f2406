"""Input batches: synthetic (the default, like the reference harnesses) or an ImageFolder read
by one of the loaders in `bench.rank.loaders` (torch, nvjpeg, dali).

Every source is an endless iterator of (images, labels) already on the training device in the
run's memory format. The worker times `next()` on it separately from the step, so a starved GPU
shows up as data wait rather than as slow training, and `loader_rate` measures the loader alone
(no model) so the report can set what the loader delivers beside what the model consumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch

from bench.rank.loaders import torch_loader
from bench.spec import SYNTHETIC

Batch = tuple[torch.Tensor, torch.Tensor]
LOADER_WINDOW_MAX_S = 10.0  # the loader-only window: at most this long (and >= 1 batch)


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


def loader_function(loader: str) -> Callable[..., Iterator[Batch]]:
    """The batches function of a loader name (imports only that loader's libraries)."""
    if loader == "torch":
        return torch_loader.torch_batches
    if loader == "nvjpeg":
        from bench.rank.loaders.nvjpeg import nvjpeg_batches

        return nvjpeg_batches
    if loader == "dali":
        from bench.rank.loaders.dali import dali_batches

        return dali_batches
    raise ValueError(f"unknown loader {loader!r}: torch, nvjpeg or dali")


def queue_depth(loader: str, workers: int) -> int:
    """Batches a loader can have ready before it is asked: drained before timing it alone."""
    if loader == "dali":
        from bench.rank.loaders.dali import PREFETCH_QUEUE_DEPTH

        return PREFETCH_QUEUE_DEPTH
    ahead = 1 if loader == "nvjpeg" else 0  # one batch decoded ahead on the side stream
    return torch_loader.queue_depth(workers) + ahead


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
    loader: str,
) -> Iterator[Batch]:
    if data == SYNTHETIC:
        return synthetic_batches(batch, image_size, num_classes, device, memory_format, seed + rank)
    return loader_function(loader)(
        data, batch, image_size, workers, rank, world_size, device, memory_format, seed
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loader_rate(
    batches: Iterator[Batch],
    max_batches: int,
    device: torch.device,
    skip: int = 0,
    max_seconds: float = LOADER_WINDOW_MAX_S,
) -> float:
    """Images per second the loader delivers alone (no model): `skip` batches (what it had
    queued) untimed, then up to `max_batches` batches or `max_seconds`, whichever ends first,
    waiting at the end for GPU-side decoding and augmentation to finish."""
    for _ in range(skip):
        next(batches)
    _synchronize(device)
    start = time.perf_counter()
    images = count = 0
    while count < max(1, max_batches):
        images += next(batches)[0].shape[0]
        count += 1
        if time.perf_counter() - start >= max_seconds:
            break
    _synchronize(device)
    return images / (time.perf_counter() - start)

"""Input batches: synthetic (the default, like the reference harnesses) or an ImageFolder read
by one of the loaders in `bench.rank.loaders` (torch, nvjpeg, dali).

Every source is an endless iterator of (images, labels) already on the training device in the
run's memory format. The worker times `next()` on it separately from the step, so a starved GPU
shows up as data wait rather than as slow training, and `loader_rate` measures the loader alone
(no model) so the report can set what the loader delivers beside what the model consumes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from bench.rank import timing
from bench.rank.loaders import LoaderRequest, loader_named
from bench.rank.profiling import synchronize
from bench.spec import SYNTHETIC

Batch = tuple[torch.Tensor, torch.Tensor]


def synthetic_batches(request: LoaderRequest) -> Iterator[Batch]:
    """One random batch made once on the device and reused: measures the model, not input."""
    generator = torch.Generator().manual_seed(request.seed + request.rank)
    size = request.image_size
    images = torch.randn(request.batch, 3, size, size, generator=generator)
    labels = torch.randint(0, request.num_classes, (request.batch,), generator=generator)
    images = images.to(request.device).contiguous(memory_format=request.memory_format)
    labels = labels.to(request.device)
    while True:
        yield images, labels


def make_batches(request: LoaderRequest, loader: str) -> Iterator[Batch]:
    """The run's input: synthetic batches, or the registered `loader` reading `request.root`."""
    if request.root == SYNTHETIC:
        return synthetic_batches(request)
    return loader_named(loader).batches(request)


def loader_rate(
    batches: Iterator[Batch],
    max_batches: int,
    device: torch.device,
    skip: int = 0,
    max_seconds: float = timing.LOADER_WINDOW_MAX_S,
) -> float:
    """bench.rank.timing.loader_rate over the loader's batches, after `skip` batches (what it
    had queued) untimed, waiting for GPU-side decoding and augmentation to finish."""
    for _ in range(skip):
        next(batches)
    return timing.loader_rate(
        lambda: next(batches)[0].shape[0], max_batches, lambda: synchronize(device), max_seconds
    )

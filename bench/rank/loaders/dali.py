"""The NVIDIA DALI path: DALI's own threads read, decode (nvJPEG, "mixed") and augment.

The pipeline is the ResNet-50 one of NVIDIA's DeepLearningExamples: file reader sharded over
all ranks, random-resized-crop fused into the decoder, resize, flip and normalise with
`crop_mirror_normalize`, output NCHW float32 on this rank's GPU. `fn.readers.file` reads the
same file list and labels as the other loaders (`folder.list_images`); DALI shards it itself:
every rank shuffles the whole list with the same reader seed after each epoch
(`shuffle_after_epoch`) and reads its own contiguous shard, so shards stay disjoint and the
order changes every epoch, like DistributedSampler.set_epoch.

Needs the `nvidia-dali-cuda120` or `-cuda130` wheel matching torch's CUDA major
(bench.loader_support refuses the loader before launch otherwise) and a CUDA device: DALI's
GPU operators have no CPU fallback here. Unverified on this project's CI (no GPU); see
bench/README.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from bench.rank.loaders.torch_loader import no_full_batch
from bench.shared.folder import list_images
from bench.shared.loaders import MEAN, RATIO, SCALE, STD, LoaderRequest

Batch = tuple[torch.Tensor, torch.Tensor]
PREFETCH_QUEUE_DEPTH = 2  # DALI's default: batches decoded ahead


def _pipeline(
    files: list[str],
    labels: list[int],
    image_size: int,
    rank: int,
    world_size: int,
    reader_seed: int,
    gpu: bool = True,
    **pipeline_args: Any,
) -> Any:
    """The DALI pipeline; gpu=False runs every operator on the CPU (device_id=None), which is
    how it was checked on a machine without a GPU."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(**pipeline_args)  # type: ignore[misc]
    def resnet50_training() -> Any:
        jpegs, label = fn.readers.file(
            files=files,
            labels=labels,
            shard_id=rank,
            num_shards=world_size,
            shuffle_after_epoch=True,
            seed=reader_seed,  # one seed on every rank: one permutation, disjoint shards
            name="reader",
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="mixed" if gpu else "cpu",
            output_type=types.RGB,
            random_area=list(SCALE),
            random_aspect_ratio=list(RATIO),
            num_attempts=10,
        )
        images = fn.resize(images, resize_x=image_size, resize_y=image_size, antialias=True)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            mean=[m * 255 for m in MEAN],
            std=[s * 255 for s in STD],
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, label.gpu() if gpu else label

    return resnet50_training()


def batches(request: LoaderRequest) -> Iterator[Batch]:
    """Each rank's DALI pipeline on its own GPU, `request.workers` DALI CPU threads."""
    device, seed, rank = request.device, request.seed, request.rank
    if device.type != "cuda":  # said before DALI is imported: also where it is not installed
        raise ValueError("the dali loader needs a CUDA device")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    _, samples = list_images(request.root)
    if len(samples) // request.world_size < request.batch:
        raise no_full_batch(request, len(samples))
    pipeline = _pipeline(
        [path for path, _ in samples],
        [label for _, label in samples],
        request.image_size,
        rank,
        request.world_size,
        reader_seed=seed,
        batch_size=request.batch,
        num_threads=max(1, request.workers),
        device_id=device.index if device.index is not None else torch.cuda.current_device(),
        seed=seed + 1 + rank,  # the augmentations' random stream, different per rank
        prefetch_queue_depth=PREFETCH_QUEUE_DEPTH,
    )
    iterator = DALIGenericIterator(
        [pipeline],
        ["images", "labels"],
        reader_name="reader",
        last_batch_policy=LastBatchPolicy.DROP,
        auto_reset=True,
    )
    while True:  # auto_reset: each `for` is one epoch
        for outputs in iterator:
            images = outputs[0]["images"].contiguous(memory_format=request.memory_format)
            yield images, outputs[0]["labels"].view(-1).long()


def queue_depth(workers: int) -> int:
    """DALI's own prefetch queue (its CPU threads, `workers`, fill it)."""
    return PREFETCH_QUEUE_DEPTH

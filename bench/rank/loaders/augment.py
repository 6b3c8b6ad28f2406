"""Training augmentation on image tensors, on whichever device they are (GPU or CPU).

The ResNet-50 recipe of the reference harnesses: random resized crop (scale 0.08-1, aspect
3/4-4/3, torchvision's sampling with its centre-crop fallback), horizontal flip with
probability 1/2, and per-channel normalisation with ImageNet's mean and standard deviation.
The `nvjpeg` loader runs it on the GPU on freshly decoded images; the tests run the very same
functions on CPU tensors. Crop parameters come from a `random.Random` seeded per rank, so a run
is reproducible and ranks do not draw the same crops.
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn.functional as F

from bench.rank.loaders import MEAN, RATIO, SCALE, STD


def random_resized_crop_params(
    height: int, width: int, rng: random.Random
) -> tuple[int, int, int, int]:
    """(top, left, crop height, crop width): torchvision's RandomResizedCrop.get_params."""
    area = height * width
    log_ratio = (math.log(RATIO[0]), math.log(RATIO[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    # Fallback: the largest centred crop within the aspect-ratio range.
    in_ratio = width / height
    if in_ratio < RATIO[0]:
        w, h = width, round(width / RATIO[0])
    elif in_ratio > RATIO[1]:
        h, w = height, round(height * RATIO[1])
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def resized_crop(image: torch.Tensor, box: tuple[int, int, int, int], size: int) -> torch.Tensor:
    """Crop a CHW image (any dtype) to `box` and resize it to size x size, as float32:
    bilinear with antialiasing, like torchvision's tensor Resize."""
    top, left, h, w = box
    crop = image[:, top : top + h, left : left + w].unsqueeze(0).float()
    return F.interpolate(
        crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True
    )[0]


def normalize_(images: torch.Tensor) -> torch.Tensor:
    """In place: 0..255 values of an NCHW float batch -> (x/255 - mean) / std per channel."""
    mean = torch.tensor(MEAN, device=images.device, dtype=images.dtype).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=images.device, dtype=images.dtype).view(1, 3, 1, 1) * 255
    return images.sub_(mean).div_(std)


def augment_batch(
    images: list[torch.Tensor],
    size: int,
    rng: random.Random,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """Decoded CHW uint8 images of any sizes (all on one device) -> one normalised float32
    N x 3 x size x size batch on that device: random resized crop, random flip, normalise."""
    if not images:
        raise ValueError("augment_batch needs at least one image")
    device = images[0].device
    out = torch.empty((len(images), 3, size, size), dtype=torch.float32, device=device)
    flips = []
    for i, image in enumerate(images):
        _, height, width = image.shape
        out[i] = resized_crop(image, random_resized_crop_params(height, width, rng), size)
        flips.append(rng.random() < 0.5)
    flip = torch.tensor(flips, device=device).view(-1, 1, 1, 1)
    out = torch.where(flip, out.flip(-1), out)
    return normalize_(out).contiguous(memory_format=memory_format)

"""Training augmentation on image tensors, on whichever device they are (GPU or CPU).

The ResNet-50 recipe of the reference harnesses: random resized crop (scale 0.08-1, aspect
3/4-4/3, torchvision's sampling with its centre-crop fallback), horizontal flip with
probability 1/2, and per-channel normalisation with ImageNet's mean and standard deviation.
The GPU loaders (`nvjpeg`, `nvimgcodec`) run it on freshly decoded images; the tests run the very
same functions on CPU tensors. Crop parameters come from a `random.Random` seeded per rank, so a
run is reproducible and ranks do not draw the same crops.

A whole batch is resized at once. Each image's crop is copied into one zero-padded batch buffer
(a copy per image), and the resize of every crop to size x size is two batched matrix products
over the buffer: the rows, then the columns, each image with its own weight matrix. The weights
are those of torchvision's antialiased bilinear resize (PIL's triangle filter, widened by the
downscale factor and renormalised at the crop's edges), so the result is torchvision's
`resized_crop(..., antialias=True)` of each image; a flip reverses the column weights. Resizing
image by image (an interpolate, and its casts and copies, per image) cost two thirds of the GPU
loader's time on one H100 (docs/results/2026-11-26-h100: decode alone 21,222 img/s, decode and
augment 7,751).
"""

from __future__ import annotations

import math
import random

import torch

from bench.shared.loaders import MEAN, RATIO, SCALE, STD

# Crop buffer elements (pixels x channels) resized in one pass: 2^28 is 256 crops of 580 x 580
# (512 MiB in half precision). A batch of larger crops is resized in several passes, its crops
# sorted by size so each pass pads little.
PASS_ELEMENTS = 1 << 28


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


def resize_weights(
    lengths: torch.Tensor, size: int, extent: int, flip: torch.Tensor | None = None
) -> torch.Tensor:
    """(N, size, extent) float32: row t of matrix n makes output pixel t from the first
    lengths[n] input pixels (the rest weigh 0), with the weights of torchvision's antialiased
    bilinear resize (aten's upsample_bilinear2d_aa: a triangle filter whose support is the scale
    factor when downscaling and 1 when upscaling, centred on scale * (t + 1/2), normalised over
    the pixels it reaches). Where flip[n], the rows run backwards: output pixel t is made as
    size - 1 - t."""
    device = lengths.device
    length = lengths.to(torch.float32).view(-1, 1, 1)
    scale = length / size
    stretch = torch.clamp(scale, min=1.0)  # the filter widens only when downscaling
    out = torch.arange(size, device=device, dtype=torch.float32).view(1, -1, 1)
    if flip is not None:
        out = torch.where(flip.view(-1, 1, 1), size - 1 - out, out)
    centre = scale * (out + 0.5)
    pixel = torch.arange(extent, device=device, dtype=torch.float32).view(1, 1, -1)
    weights = torch.clamp(1 - (pixel + 0.5 - centre).abs() / stretch, min=0)
    weights = weights * (pixel < length)
    return weights / weights.sum(-1, keepdim=True)


def _passes(boxes: list[tuple[int, int, int, int]]) -> list[list[int]]:
    """The batch's images in passes of at most PASS_ELEMENTS padded crop elements: all in one
    pass when they fit, else sorted by crop size and cut greedily."""

    def padded(indices: list[int]) -> int:
        return (
            len(indices) * max(boxes[i][2] for i in indices) * max(boxes[i][3] for i in indices) * 3
        )

    everything = list(range(len(boxes)))
    if padded(everything) <= PASS_ELEMENTS:
        return [everything]
    passes: list[list[int]] = [[]]
    for i in sorted(everything, key=lambda i: (boxes[i][2], boxes[i][3])):
        if passes[-1] and padded([*passes[-1], i]) > PASS_ELEMENTS:
            passes.append([])
        passes[-1].append(i)
    return passes


def resized_crops(
    images: list[torch.Tensor],
    boxes: list[tuple[int, int, int, int]],
    flips: list[bool],
    size: int,
) -> torch.Tensor:
    """Each CHW image cropped to its (top, left, height, width) box, resized to size x size
    (antialiased bilinear, torchvision's) and mirrored where its flip is set: one N x size x
    size x 3 tensor of 0..255 values (float16 on a GPU, float32 on CPU)."""
    device = images[0].device
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    out = torch.empty((len(images), size, size, 3), dtype=dtype, device=device)
    for indices in _passes(boxes):
        height = max(boxes[i][2] for i in indices)
        width = max(boxes[i][3] for i in indices)
        # zeros: the padding is multiplied by weight 0, and 0 x garbage may be NaN
        crops = torch.zeros((len(indices), height, width, 3), dtype=dtype, device=device)
        for row, i in enumerate(indices):
            top, left, h, w = boxes[i]
            crops[row, :h, :w].copy_(images[i][:, top : top + h, left : left + w].permute(1, 2, 0))
        shape = torch.tensor([boxes[i][2:] for i in indices], dtype=torch.int32)
        flipped = torch.tensor([flips[i] for i in indices])
        shape, flipped = shape.to(device, non_blocking=True), flipped.to(device, non_blocking=True)
        rows = resize_weights(shape[:, 0], size, height).to(dtype)
        columns = resize_weights(shape[:, 1], size, width, flipped).to(dtype)
        resized = torch.einsum(
            "ntw,nswc->nstc", columns, torch.einsum("nsh,nhwc->nswc", rows, crops)
        )
        if len(indices) == len(images):
            return resized
        out[torch.tensor(indices, device=device)] = resized
    return out


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
    boxes, flips = [], []
    for image in images:
        _, height, width = image.shape
        boxes.append(random_resized_crop_params(height, width, rng))
        flips.append(rng.random() < 0.5)
    resized = resized_crops(images, boxes, flips, size)  # N x size x size x 3, 0..255
    # (x / 255 - mean) / std in one pass, into float32
    device = resized.device
    scale = 1 / (255 * torch.tensor(STD, device=device))
    shift = -torch.tensor(MEAN, device=device) / torch.tensor(STD, device=device)
    normalised = torch.addcmul(shift, resized, scale)
    return normalised.permute(0, 3, 1, 2).contiguous(memory_format=memory_format)

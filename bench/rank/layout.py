"""Handing tensors of any memory layout to libraries that accept only row-major ones (Horovod).

Horovod's collectives refuse a tensor that is not row-major contiguous ("Tensor is required to
be contiguous", horovod/torch/mpi_ops.py), but a channels_last convolution weight, and the
gradient autograd lays out like it (the gradient layout contract), is not. Both operations
Horovod performs on them, broadcast and allreduce, are element-wise, so they may run on any
view that covers the same memory: for a dense tensor (no gaps, no overlap, e.g. channels_last)
permuting its dimensions into stride order gives a row-major view of the same storage at no
cost; only a tensor with gaps or overlaps needs a copy.
"""

from __future__ import annotations

from typing import Any

import torch


def row_major_alias(tensor: torch.Tensor) -> tuple[torch.Tensor, list[int] | None]:
    """(a row-major view of `tensor`'s own memory, the permutation that undoes it), or
    (tensor, None) when it already is row-major. Raises ValueError for a tensor with gaps or
    overlapping elements, which no view can make row-major."""
    if tensor.is_contiguous():
        return tensor, None
    # the dimensions from largest to smallest stride (a no-op order for row-major)
    order = sorted(range(tensor.dim()), key=lambda d: (-tensor.stride(d), d))
    view = tensor.permute(order)
    if not view.is_contiguous():
        raise ValueError(
            f"tensor with sizes {tuple(tensor.shape)} and strides "
            f"{tensor.stride()} is not dense: no row-major view exists"
        )
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return view, inverse


def row_major(tensor: torch.Tensor) -> tuple[torch.Tensor, list[int] | None, bool]:
    """(row-major tensor, permutation back, whether it aliases `tensor`): the free view where one
    exists, else a row-major copy (same shape, so no permutation) the caller must copy back."""
    try:
        view, inverse = row_major_alias(tensor)
        return view, inverse, True
    except ValueError:
        return tensor.contiguous(), None, False


class RowMajorCompression:
    """A Horovod compressor (compress/decompress, like hvd.Compression.none or .fp16) that
    reduces each gradient through a row-major view of it and hands the result back with the
    gradient's own shape and strides, so Horovod's `p.grad.set_(result)` keeps the layout.
    `inner` is the real compression, applied to the row-major view."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def compress(self, tensor: torch.Tensor) -> tuple[torch.Tensor, Any]:
        view, inverse, _ = row_major(tensor)
        compressed, ctx = self.inner.compress(view)
        return compressed, (ctx, inverse)

    def decompress(self, tensor: torch.Tensor, ctx: Any) -> torch.Tensor:
        inner_ctx, inverse = ctx
        out = self.inner.decompress(tensor, inner_ctx)
        return out if inverse is None else out.permute(inverse)


def broadcast_in_place(hvd: Any, tensors: dict[str, torch.Tensor], root_rank: int = 0) -> None:
    """hvd.broadcast_parameters for tensors of any layout: each tensor receives root's values
    in place, through its row-major alias (no copy) or, for a tensor with gaps, a copy."""
    pending = []
    for name, tensor in sorted(tensors.items()):
        buffer, _, aliased = row_major(tensor)
        handle = hvd.broadcast_async_(buffer, root_rank, name=f"broadcast.{name}")
        pending.append((tensor, buffer, aliased, handle))
    for tensor, buffer, aliased, handle in pending:
        hvd.synchronize(handle)
        if not aliased:
            with torch.no_grad():
                tensor.copy_(buffer)

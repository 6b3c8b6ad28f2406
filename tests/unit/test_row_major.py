"""Row-major aliases of tensors in any memory layout (bench.rank.layout), for Horovod."""

from __future__ import annotations

import pytest
import torch

from bench.rank import layout


def test_channels_last_gets_a_free_row_major_view_of_its_own_memory() -> None:
    weight = torch.randn(8, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    assert not weight.is_contiguous()  # what Horovod refused
    view, inverse = layout.row_major_alias(weight)
    assert view.is_contiguous() and view.data_ptr() == weight.data_ptr()
    assert inverse is not None
    back = view.permute(inverse)
    assert back.shape == weight.shape and back.stride() == weight.stride()
    view.mul_(2)  # an element-wise collective writing into the view updates the weight
    assert torch.equal(back, weight)


def test_row_major_and_other_dense_layouts() -> None:
    plain = torch.randn(4, 6)
    assert layout.row_major_alias(plain) == (plain, None)
    for tensor in (
        torch.randn(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d),
        torch.randn(5, 7).t(),
    ):
        view, inverse = layout.row_major_alias(tensor)
        assert view.is_contiguous() and view.data_ptr() == tensor.data_ptr()
        assert torch.equal(view.permute(inverse), tensor)


def test_tensors_with_gaps_are_copied_not_viewed() -> None:
    strided = torch.randn(4, 6)[:, ::2]
    with pytest.raises(ValueError, match="not dense"):
        layout.row_major_alias(strided)
    copy, inverse, aliased = layout.row_major(strided)
    assert copy.is_contiguous() and not aliased and inverse is None
    assert torch.equal(copy, strided) and copy.data_ptr() != strided.data_ptr()


class Fp16Like:
    """The shape of hvd.Compression.fp16: compress to half, decompress to the original dtype."""

    @staticmethod
    def compress(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
        return tensor.to(torch.float16), tensor.dtype

    @staticmethod
    def decompress(tensor: torch.Tensor, ctx: torch.dtype) -> torch.Tensor:
        return tensor.to(ctx)


def test_compression_hands_back_the_gradient_layout() -> None:
    grad = torch.randn(8, 3, 3, 3).contiguous(memory_format=torch.channels_last)
    compression = layout.RowMajorCompression(Fp16Like())
    sent, ctx = compression.compress(grad)
    assert sent.is_contiguous() and sent.dtype == torch.float16  # what Horovod accepts
    sent.mul_(0.5)  # stands for the averaging allreduce
    received = compression.decompress(sent, ctx)
    assert received.shape == grad.shape and received.dtype == grad.dtype
    assert received.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(received, grad * 0.5, atol=1e-2)
    grad.set_(received)  # what Horovod's synchronize does with the result
    assert grad.is_contiguous(memory_format=torch.channels_last)


class RecordingHorovod:
    """broadcast_async_/synchronize with Horovod's contract: row-major tensors only, in place.
    Receiving root's values is modelled as a fill with 7."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def broadcast_async_(self, tensor: torch.Tensor, root_rank: int, name: str) -> torch.Tensor:
        if not tensor.is_contiguous():
            raise ValueError("Tensor is required to be contiguous.")
        self.names.append(name)
        tensor.fill_(7.0)
        return tensor

    def synchronize(self, handle: torch.Tensor) -> None:
        pass


def test_broadcast_in_place_reaches_every_layout() -> None:
    tensors = {
        "conv": torch.zeros(4, 3, 3, 3).contiguous(memory_format=torch.channels_last),
        "bias": torch.zeros(4),
        "strided": torch.zeros(4, 6)[:, ::2],
    }
    hvd = RecordingHorovod()
    layout.broadcast_in_place(hvd, tensors)
    assert hvd.names == ["broadcast.bias", "broadcast.conv", "broadcast.strided"]  # same order
    for name, tensor in tensors.items():
        assert bool((tensor == 7).all()), name
    assert tensors["conv"].is_contiguous(memory_format=torch.channels_last)

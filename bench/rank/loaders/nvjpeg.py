"""The nvJPEG path: workers read file bytes, the GPU decodes and augments whole batches.

DataLoader workers only read files (cheap, IO-parallel); the training process hands each batch
of encoded JPEGs to torchvision's batched `decode_jpeg(..., device="cuda")` (nvJPEG) and runs
`augment.augment_batch` on the decoded images on the GPU. A producer thread decodes the next
batches on a side CUDA stream while the current one trains, so decoding overlaps the step instead
of adding to it (`ahead_pipeline`). The `nvimgcodec` loader shares all of this
(`decoded_batches`) with another decoder.

Files nvJPEG cannot decode (ImageNet has a PNG and some CMYK JPEGs named .JPEG) are decoded
one by one, falling back to PIL on the host for any the GPU refuses. On a CPU device the same
code runs with torchvision's CPU decoder where its compiled ops load, else PIL: that is how the
tests exercise it; the loader choice refuses `nvjpeg` on CPU sweeps (bench.loader_support).

The producer is a thread, not the training loop: torchvision's batched GPU decode returns only
once its own kernels have run, and on a busy GPU they wait behind the training step's. On the
H100 (docs/results/2026-11-26-h100, commands/decode_sync_probe.py) one call for 256 files held
its caller 10.5 ms with the GPU idle and 51.6 ms behind 300 ms of queued work (decode and
augment: 20.9 and 63.5 ms). Called from the training loop, that wait kept the loop from
queueing the next step: 3,367 img/s, 66.8 % of the window waiting for data. From this
thread: 4,443 img/s, 41.3 % (the model alone 5,577, the loader alone 8,290-8,898).
"""

from __future__ import annotations

import contextlib
import io
import queue
import random
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from bench.rank.loaders import torch_loader
from bench.rank.loaders.augment import augment_batch
from bench.rank.loaders.torch_loader import sharded_epochs
from bench.shared.folder import list_images
from bench.shared.loaders import LoaderRequest
from bench.shared.models import import_submodule

Batch = tuple[torch.Tensor, torch.Tensor]
EncodedBatch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (bytes, lengths, labels)


def collate_encoded(items: list[tuple[str, int]]) -> EncodedBatch:
    """A batch of (path, label) samples read (in the DataLoader worker) into one buffer: (the
    files' bytes end to end, each file's length, the labels). A DataLoader worker hands every
    tensor of a batch to the training process in a shared-memory segment of its own, so a list
    of 256 files cost 256 segments per batch: on the H100 (docs/results/2026-11-25-h100) that
    loader delivered 1,838 img/s while the GPU decoded 18,485 and augmented 19,474 img/s. Three
    tensors cost three segments."""
    files = [
        torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8) for path, _ in items
    ]
    lengths = torch.tensor([len(data) for data in files])
    return torch.cat(files), lengths, torch.tensor([label for _, label in items])


def split_encoded(data: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
    """The files of a collated batch, as views of its buffer (decode_jpeg takes a list)."""
    return list(torch.split(data, lengths.tolist()))


def pil_decode(data: torch.Tensor) -> torch.Tensor:
    """Any image file PIL reads -> CHW uint8 RGB tensor (grey and CMYK converted)."""
    from PIL import Image

    with Image.open(io.BytesIO(data.numpy().tobytes())) as image:
        rgb = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
        return rgb.view(image.height, image.width, 3).permute(2, 0, 1).contiguous()


class JpegDecoder:
    """Batched nvJPEG decode on a CUDA device; on CPU torchvision's decoder, else PIL."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._warned = False
        tvio = import_submodule("io")
        self._decode_jpeg = tvio.decode_jpeg
        self._rgb = tvio.ImageReadMode.RGB
        # torchvision's CPU decode_jpeg needs its compiled image extension; with a CUDA build
        # of torchvision beside a CPU torch it does not load (RuntimeError)
        self._torchvision_cpu = False
        if device.type == "cpu":
            with contextlib.suppress(RuntimeError):
                self._decode_jpeg(probe_jpeg(8, 8), mode=self._rgb)
                self._torchvision_cpu = True

    @property
    def backend(self) -> str:
        if self.device.type == "cuda":
            return "nvjpeg"
        return "torchvision-cpu" if self._torchvision_cpu else "pil"

    def _one(self, data: torch.Tensor) -> torch.Tensor:
        try:
            if self.device.type == "cuda" or self._torchvision_cpu:
                image: torch.Tensor = self._decode_jpeg(data, mode=self._rgb, device=self.device)
                return image
        except RuntimeError:
            pass
        return pil_decode(data).to(self.device)

    def __call__(self, encoded: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.device.type == "cuda":
            try:
                images: list[torch.Tensor] = self._decode_jpeg(
                    encoded, mode=self._rgb, device=self.device
                )
                return images
            except RuntimeError as exc:  # one file nvJPEG refuses fails the whole batch
                if not self._warned:
                    print(
                        f"nvjpeg: a batch failed ({exc}); decoding such batches one by one, "
                        "with PIL for the files the GPU refuses",
                        file=sys.stderr,
                    )
                    self._warned = True
        return [self._one(data) for data in encoded]


# Batches produced ahead of the training step by the producer thread (queued, beside the one it
# is producing).
AHEAD = 2


def ahead_pipeline(
    items: Iterator[Any], produce: Callable[[Any], Batch], device: torch.device, depth: int = AHEAD
) -> Iterator[Batch]:
    """produce(item) for each item, in order, in a thread of its own up to `depth` batches
    ahead of the consumer; on a GPU on a side stream, each batch handed over with an event the
    consumer's stream waits for (see the module docstring for why a thread)."""
    handoff: queue.Queue[tuple[Any, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def hand_over(entry: tuple[Any, Any]) -> bool:
        """Queue one entry; False once the consumer has gone."""
        while not stop.is_set():
            try:
                handoff.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.set_device(device)  # the current device is per thread
        stream = torch.cuda.Stream(device) if cuda else None
        try:
            with torch.cuda.stream(stream):  # None: no stream to switch to (CPU)
                for item in items:
                    batch, done = produce(item), None
                    if cuda:  # the event that marks the batch done
                        done = torch.cuda.Event()
                        done.record(stream)
                    if not hand_over((batch, done)):
                        return
        except BaseException as exc:  # the consumer raises it
            hand_over((exc, None))
            return
        hand_over((StopIteration(), None))

    threading.Thread(target=run, name="batch-producer", daemon=True).start()
    try:
        while True:
            batch, done = handoff.get()
            if isinstance(batch, StopIteration):
                return
            if isinstance(batch, BaseException):
                raise batch
            if done is not None:
                current = torch.cuda.current_stream(device)
                current.wait_event(done)
                for tensor in batch:
                    tensor.record_stream(current)  # allocated on the side stream, used here
            yield batch
    finally:
        stop.set()


def decoded_batches(
    request: LoaderRequest, decoder: Callable[[list[torch.Tensor]], list[torch.Tensor]]
) -> Iterator[Batch]:
    """Each rank reads its shard's file bytes; `decoder` turns a batch of them into CHW uint8
    images on the rank's device, and augment_batch crops, resizes, flips and normalises them
    there, in the producer thread."""
    _, samples = list_images(request.root)
    # the decoders read host memory: nothing to pin
    shard = sharded_epochs(samples, request, pin_memory=False, collate_fn=collate_encoded)
    device = request.device
    # crops and flips: reproducible, different per rank
    rng = random.Random(f"{request.seed}-{request.rank}")

    def produce(item: EncodedBatch) -> Batch:
        data, lengths, labels = item
        encoded = split_encoded(data, lengths)
        images = augment_batch(decoder(encoded), request.image_size, rng, request.memory_format)
        return images, labels.to(device, non_blocking=True)

    yield from ahead_pipeline(shard, produce, device)


def batches(request: LoaderRequest) -> Iterator[Batch]:
    """torchvision's batched nvJPEG decode (on CPU: its CPU decoder, else PIL)."""
    return decoded_batches(request, JpegDecoder(request.device))


def queue_depth(workers: int) -> int:
    """The DataLoader's queue, the batches queued by the producer thread and the one it is
    producing."""
    return torch_loader.queue_depth(workers) + AHEAD + 1


def probe_jpeg(width: int, height: int) -> torch.Tensor:
    """A small red JPEG's bytes: what the decode probes ask a GPU decoder to read."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 10)).save(buffer, "JPEG")
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def gpu_decode_problem() -> str:
    """Why torchvision cannot decode a JPEG on the GPU here, or "" (run in a child process by
    bench.loader_support before launch: it initialises CUDA)."""
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    from bench.shared.models import torchvision_has_compiled_ops, torchvision_version

    if not torchvision_has_compiled_ops():
        return (
            f"torchvision {torchvision_version()}'s compiled ops do not load beside torch "
            f"{torch.__version__} (install the torchvision build made for this torch)"
        )
    data = probe_jpeg(16, 16)
    decoder = JpegDecoder(torch.device("cuda"))
    try:
        decoded = decoder._decode_jpeg([data], mode=decoder._rgb, device="cuda")
    except (RuntimeError, TypeError) as exc:
        return f"torchvision {torchvision_version()} cannot decode JPEGs on the GPU: {exc}"
    if decoded[0].shape != (3, 16, 16) or not decoded[0].is_cuda:
        return f"torchvision {torchvision_version()}'s GPU decode returned {decoded[0].shape}"
    return ""

"""Real-data input: the JPEG folder helper, sharding, DataLoader settings, the GPU augmentation
and nvJPEG decode paths run on CPU tensors, the loader-only rate and the loader refusals."""

from __future__ import annotations

import io
import math
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy
import numpy as np
import pytest
import torch
from PIL import Image

from bench import datasets, loader_support
from bench.rank import worker
from bench.rank.loaders import augment, nvimgcodec, nvjpeg, torch_loader
from bench.shared import folder
from bench.shared.loaders import LOADERS, LoaderRequest, loader_named
from bench.shared.models import import_submodule

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def jpeg_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jpegs") / "train"
    datasets.make_jpeg_folder(root, images=24, size=(40, 30), classes=3, seed=1)
    return root


# --- the data-set helper and the ImageFolder listing -------------------------------------------


def test_make_jpeg_folder_writes_decodable_jpegs_of_the_size_in_each_class(
    jpeg_folder: Path,
) -> None:
    files = sorted(jpeg_folder.rglob("*.JPEG"))
    assert len(files) == 24
    assert sorted(p.name for p in jpeg_folder.iterdir()) == ["class_000", "class_001", "class_002"]
    assert all(len(list((jpeg_folder / c).iterdir())) == 8 for c in ("class_000", "class_001"))
    with Image.open(files[0]) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (40, 30), "RGB")
        pixels = torch.from_numpy(numpy.array(image)).float()
    assert pixels.std() > 5  # not a flat colour: decoding costs what a photograph's does


def test_make_jpeg_folder_is_reproducible_and_refuses_a_non_empty_directory(
    tmp_path: Path,
) -> None:
    a = datasets.make_jpeg_folder(tmp_path / "a", images=3, size=(16, 16), classes=1, seed=5)
    b = datasets.make_jpeg_folder(tmp_path / "b", images=3, size=(16, 16), classes=1, seed=5)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    with pytest.raises(folder.DatasetError, match="not empty"):
        datasets.make_jpeg_folder(tmp_path / "a", images=3, size=(16, 16), classes=1)
    with pytest.raises(folder.DatasetError, match="at least as many images"):
        datasets.make_jpeg_folder(tmp_path / "c", images=2, size=(16, 16), classes=3)


def test_cli_makes_and_checks_a_folder_and_reports_errors_with_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "set"
    args = ["make-jpeg-folder", str(root), "--images", "4", "--size", "20x10", "--classes", "2"]
    assert datasets.main(args) == 0
    assert datasets.main(["check", str(root)]) == 0
    assert "4 images in 2 classes" in capsys.readouterr().out
    assert datasets.main(args) == 2
    assert "not empty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        datasets.main(["make-jpeg-folder", str(tmp_path / "x"), "--size", "20by10"])


def test_imagenet_train_layout_lists_like_torchvision_imagefolder(tmp_path: Path) -> None:
    """train/<wnid>/<wnid>_<n>.JPEG as extracted, plus a file that is no image."""
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / wnid).mkdir()
        for n in (10026, 2):
            Image.new("RGB", (8, 8)).save(tmp_path / wnid / f"{wnid}_{n}.JPEG", "JPEG")
    (tmp_path / "n01440764" / "README.txt").write_text("not an image")
    classes, samples = folder.list_images(tmp_path)
    reference = import_submodule("datasets").ImageFolder(
        str(tmp_path), loader=import_submodule("datasets").folder.pil_loader
    )
    assert classes == reference.classes == ["n01440764", "n01443537"]
    assert samples == reference.samples
    assert len(samples) == 4


def test_list_images_refuses_what_no_loader_can_read(tmp_path: Path) -> None:
    with pytest.raises(folder.DatasetError, match="not a directory"):
        folder.list_images(tmp_path / "absent")
    with pytest.raises(folder.DatasetError, match="no class subdirectories"):
        folder.list_images(tmp_path)
    (tmp_path / "cls").mkdir()
    with pytest.raises(folder.DatasetError, match="no image files"):
        folder.list_images(tmp_path)


# --- sharding and DataLoader settings -----------------------------------------------------------


def shard(rank: int, world: int, epoch: int, seed: int = 0, n: int = 103) -> list[int]:
    sampler = torch_loader.distributed_sampler(list(range(n)), rank, world, seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_shards_are_disjoint_across_ranks_of_all_nodes() -> None:
    world = 8  # e.g. 2 nodes x 4 GPUs: global ranks 0..7
    shards = [shard(rank, world, epoch=0) for rank in range(world)]
    flat = [i for s in shards for i in s]
    assert len(flat) == len(set(flat)) == (103 // world) * world  # drop_last: equal shards
    assert all(len(s) == 103 // world for s in shards)


def test_order_is_seeded_new_each_epoch_and_reproducible() -> None:
    assert shard(1, 4, epoch=0) == shard(1, 4, epoch=0)
    assert shard(1, 4, epoch=0) != shard(1, 4, epoch=1)
    assert shard(1, 4, epoch=0, seed=0) != shard(1, 4, epoch=0, seed=1)
    assert set(shard(1, 4, epoch=0)) != set(shard(1, 4, epoch=1))  # shards are reshuffled too


def test_dataloader_settings_pin_persist_and_prefetch_only_with_workers() -> None:
    with_workers = torch_loader.dataloader_settings(6, pin_memory=True)
    assert with_workers["num_workers"] == 6 and with_workers["pin_memory"] is True
    assert with_workers["persistent_workers"] is True
    assert with_workers["prefetch_factor"] == torch_loader.PREFETCH_FACTOR
    # torch refuses persistent_workers/prefetch_factor without workers
    assert torch_loader.dataloader_settings(0, pin_memory=False) == {
        "num_workers": 0,
        "pin_memory": False,
    }
    assert torch_loader.queue_depth(6) == 6 * torch_loader.PREFETCH_FACTOR


# --- augmentation (the GPU path's functions on CPU tensors) -------------------------------------


def test_crop_params_follow_torchvision_bounds() -> None:
    rng = random.Random(0)
    for height, width in [(300, 400), (30, 40), (500, 20), (20, 500)]:
        for _ in range(200):
            top, left, h, w = augment.random_resized_crop_params(height, width, rng)
            assert top >= 0 and top + h <= height and left >= 0 and left + w <= width
            assert h >= 1 and w >= 1
    # so tall and narrow that no sampled crop fits: the largest centred crop of ratio 3/4
    assert augment.random_resized_crop_params(500, 20, random.Random(1)) == (236, 0, 27, 20)
    assert augment.random_resized_crop_params(20, 500, random.Random(1)) == (0, 236, 20, 27)


def test_resized_crops_match_torchvision_image_by_image_in_one_pass_or_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torchvision's own crop, antialiased resize and flip of each image: down- and upscaling,
    # crops touching every edge, images of different sizes in one batch
    functional = import_submodule("transforms.v2.functional")
    gen = torch.Generator().manual_seed(0)
    images = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen)
        for h, w in [(50, 70), (64, 48), (30, 90), (81, 81)]
    ]
    boxes = [(5, 7, 31, 43), (0, 0, 64, 48), (10, 60, 20, 30), (40, 2, 9, 11)]
    flips = [False, True, True, False]
    expected = []
    for image, (top, left, h, w), flip in zip(images, boxes, flips, strict=True):
        theirs = functional.resized_crop(image.float(), top, left, h, w, [24, 24], antialias=True)
        expected.append(theirs.flip(-1) if flip else theirs)
    expected_nhwc = torch.stack(expected).permute(0, 2, 3, 1)
    ours = augment.resized_crops(images, boxes, flips, 24)
    torch.testing.assert_close(ours, expected_nhwc, rtol=1e-4, atol=1e-3)
    # crops too large for one pass are resized in passes of similar sizes, in the batch's order
    monkeypatch.setattr(augment, "PASS_ELEMENTS", 2 * 64 * 48 * 3)
    assert len(augment._passes(boxes)) > 1
    torch.testing.assert_close(augment.resized_crops(images, boxes, flips, 24), ours)


def test_resize_weights_are_torchvisions_rows_and_ignore_the_padding() -> None:
    weights = augment.resize_weights(torch.tensor([6, 3]), 3, 8)
    assert weights.shape == (2, 3, 8)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert not weights[0, :, 6:].any() and not weights[1, :, 3:].any()  # beyond each length
    torch.testing.assert_close(weights[1, :, :3], torch.eye(3))  # the same size: the pixels
    flipped = augment.resize_weights(torch.tensor([6]), 3, 8, torch.tensor([True]))
    torch.testing.assert_close(flipped[0], weights[0].flip(0))


def test_augment_batch_normalises_flips_and_is_reproducible() -> None:
    # a constant image: every crop and flip gives the same pixels, so only normalisation shows
    grey = [torch.full((3, 30 + i, 40), 128, dtype=torch.uint8) for i in range(4)]
    out = augment.augment_batch(grey, 16, random.Random(0), torch.channels_last)
    assert out.shape == (4, 3, 16, 16) and out.dtype == torch.float32
    assert out.is_contiguous(memory_format=torch.channels_last)
    expected = [(128 / 255 - m) / s for m, s in zip(augment.MEAN, augment.STD, strict=True)]
    torch.testing.assert_close(out[:, :, 5, 5], torch.tensor([expected] * 4))
    # a left-to-right ramp: flipped images run right-to-left
    ramp = torch.arange(64, dtype=torch.uint8).repeat(3, 64, 1)
    batch = augment.augment_batch([ramp] * 16, 8, random.Random(3))
    rising = batch[:, 0, 4, -1] > batch[:, 0, 4, 0]
    assert 0 < int(rising.sum()) < 16
    again = augment.augment_batch([ramp] * 16, 8, random.Random(3))
    torch.testing.assert_close(batch, again)


# --- decoding and the nvjpeg/torch loaders on CPU -----------------------------------------------


def encode(image: Image.Image, kind: str = "JPEG") -> torch.Tensor:
    buffer = io.BytesIO()
    image.save(buffer, kind)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def test_cpu_decoder_reads_rgb_grey_cmyk_and_png_as_rgb() -> None:
    decoder = nvjpeg.JpegDecoder(CPU)
    assert decoder.backend in ("pil", "torchvision-cpu")
    images = [
        encode(Image.new("RGB", (12, 10), (250, 0, 0))),
        encode(Image.new("L", (9, 7), 90)),
        encode(Image.new("CMYK", (6, 5), (0, 255, 255, 0))),
        encode(Image.new("RGB", (4, 3), (0, 0, 250)), "PNG"),  # ImageNet has one, named .JPEG
    ]
    decoded = decoder(images)
    assert [tuple(d.shape) for d in decoded] == [(3, 10, 12), (3, 7, 9), (3, 5, 6), (3, 3, 4)]
    assert all(d.dtype == torch.uint8 for d in decoded)
    assert decoded[0][0].float().mean() > 200 and decoded[0][2].float().mean() < 50
    assert decoded[3][2].float().mean() > 200


def request_for(root: Path, rank: int, world: int, workers: int, batch: int = 4) -> LoaderRequest:
    return LoaderRequest(
        root=str(root),
        batch=batch,
        image_size=16,
        num_classes=3,
        workers=workers,
        rank=rank,
        world_size=world,
        device=CPU,
        memory_format=torch.contiguous_format,
        seed=0,
    )


def batches_of(
    loader: str, root: Path, rank: int, world: int, workers: int
) -> Iterator[worker.Batch]:
    return worker.make_batches(request_for(root, rank, world, workers), loader)


def needs_nvimgcodec(loader: str) -> None:
    if loader == "nvimgcodec":
        # scripts/test.sh installs it (with DALI, which depends on it)
        pytest.importorskip(nvimgcodec.MODULE)


def test_nvimgcodec_decoder_on_cpu_reads_rgb_grey_cmyk_progressive_and_png_as_rgb() -> None:
    pytest.importorskip(nvimgcodec.MODULE)
    decoder = nvimgcodec.HardwareJpegDecoder(CPU, threads=1)
    assert decoder.stages == (("CPU_ONLY",),)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 240, 10)).save(buffer, "JPEG", progressive=True)
    images = [
        encode(Image.new("RGB", (12, 10), (250, 0, 0))),
        encode(Image.new("L", (9, 7), 90)),
        encode(Image.new("CMYK", (6, 5), (0, 255, 255, 0))),
        torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8),
        encode(Image.new("RGB", (4, 3), (0, 0, 250)), "PNG"),  # nvImageCodec reads PNG too
    ]
    decoded = decoder(images)
    shapes = [(3, 10, 12), (3, 7, 9), (3, 5, 6), (3, 6, 8), (3, 3, 4)]
    assert [tuple(d.shape) for d in decoded] == shapes
    assert all(d.dtype == torch.uint8 for d in decoded)
    assert decoded[0][0].float().mean() > 200 and decoded[0][2].float().mean() < 50
    assert decoded[2][0].float().mean() > 200  # CMYK (0, 255, 255, 0) is red
    assert decoded[3][1].float().mean() > 200 and decoded[4][2].float().mean() > 200
    # nothing nvImageCodec reads (a GIF): PIL's turn
    assert tuple(decoder([encode(Image.new("RGB", (5, 4), (0, 0, 250)), "GIF")])[0].shape) == (
        3,
        4,
        5,
    )


class RefusesOddFiles:
    """Stands in for nvImageCodec's hardware decoder, which returns None for the files it does
    not take (progressive, CMYK): here every second file of each call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def decode(self, files: list[Any], cuda_stream: int) -> list[Any]:
        self.calls.append(len(files))
        return [None if i % 2 else ("first", len(f)) for i, f in enumerate(files)]


def test_nvimgcodec_stages_decode_only_what_the_stages_before_returned_none_for() -> None:
    first, second = RefusesOddFiles(), RefusesOddFiles()
    files = [np.zeros(n, dtype=np.uint8) for n in (10, 11, 12, 13, 14, 15)]
    decoded = nvimgcodec.decode_in_stages([first, second], files, cuda_stream=0)
    # the second stage saw files 1, 3, 5 and took 1 and 5 (its own 0th and 2nd)
    assert first.calls == [6] and second.calls == [3]
    assert decoded == [
        ("first", 10),
        ("first", 11),
        ("first", 12),
        None,
        ("first", 14),
        ("first", 15),
    ]
    # nothing left: later stages are not called
    third = RefusesOddFiles()
    nvimgcodec.decode_in_stages([RefusesOddFiles(), third], files[:1], cuda_stream=0)
    assert third.calls == []


@pytest.mark.parametrize("loader", ["torch", "nvjpeg", "nvimgcodec"])
def test_cpu_loaders_yield_normalised_batches_of_their_shard(
    loader: str, jpeg_folder: Path
) -> None:
    needs_nvimgcodec(loader)
    _, samples = folder.list_images(jpeg_folder)
    images, labels = next(batches_of(loader, jpeg_folder, rank=1, world=2, workers=0))
    assert images.shape == (4, 3, 16, 16) and images.dtype == torch.float32
    assert -3 < images.min() < images.max() < 3  # normalised, not 0..255
    assert labels.dtype == torch.int64 and set(labels.tolist()) <= {0, 1, 2}
    # the labels are those of rank 1's shard in its epoch-0 order
    expected = [samples[i][1] for i in shard(1, 2, epoch=0, n=len(samples))[:4]]
    assert labels.tolist() == expected


@pytest.mark.parametrize("loader", ["torch", "nvjpeg", "nvimgcodec"])
def test_cpu_loaders_reshuffle_every_epoch(loader: str, jpeg_folder: Path) -> None:
    needs_nvimgcodec(loader)
    # 24 images / batch 4 = 6 batches an epoch: the 7th batch starts epoch 1, whose order is the
    # sampler's epoch-1 order (DistributedSampler.set_epoch), not epoch 0's again
    _, samples = folder.list_images(jpeg_folder)
    batches = batches_of(loader, jpeg_folder, rank=0, world=1, workers=0)
    seen = [label for _ in range(12) for label in next(batches)[1].tolist()]
    expected = [[samples[i][1] for i in shard(0, 1, epoch=e, n=len(samples))] for e in (0, 1)]
    assert expected[0] != expected[1]  # the seed gives two label orders a test can tell apart
    assert seen == expected[0] + expected[1]


def test_nvjpeg_loader_with_workers_runs_epoch_after_epoch(jpeg_folder: Path) -> None:
    batches = batches_of("nvjpeg", jpeg_folder, rank=0, world=1, workers=1)
    seen = [next(batches)[1] for _ in range(12)]  # 24 images / batch 4 = 6 per epoch
    assert len(seen) == 12


def test_nvjpeg_batches_cross_from_workers_as_one_buffer(jpeg_folder: Path) -> None:
    # One shared-memory segment per file made the loader 10x slower than the GPU decode on the
    # H100 (docs/results/2026-11-25-h100): a batch is three tensors whatever its size, and the
    # views split out of it are the files' bytes.
    from bench.rank.loaders.nvjpeg import collate_encoded, split_encoded
    from bench.shared.folder import list_images

    _, samples = list_images(jpeg_folder)
    items = samples[:5]
    batch = collate_encoded(items)
    assert len(batch) == 3 and all(isinstance(t, torch.Tensor) for t in batch)
    files = split_encoded(batch[0], batch[1])
    assert [f.tolist() for f in files] == [list(Path(path).read_bytes()) for path, _ in items]
    assert batch[2].tolist() == [label for _, label in items]
    assert files[0][:2].tolist() == [0xFF, 0xD8]  # each view starts a JPEG (SOI marker)


def test_ahead_pipeline_keeps_order_and_stays_within_its_depth() -> None:
    # The producer thread runs ahead of the consumer by at most its queue and the batch it is
    # producing, and hands the batches over in the order of the items.
    import threading
    import time

    from bench.rank.loaders.nvjpeg import ahead_pipeline

    produced: list[int] = []
    lock = threading.Lock()

    def produce(i: int) -> worker.Batch:
        with lock:
            produced.append(i)
        return torch.full((2,), i), torch.tensor([i])

    pipeline = ahead_pipeline(iter(range(100)), produce, CPU, depth=2)
    assert next(pipeline)[1].tolist() == [0]
    time.sleep(0.5)  # time for the thread to fill its queue
    with lock:
        assert len(produced) == 1 + 2 + 1  # consumed, queued, produced and waiting to queue
    assert [next(pipeline)[1].item() for _ in range(20)] == list(range(1, 21))
    pipeline.close()


def test_ahead_pipeline_raises_the_producers_error_in_the_consumer_and_ends_with_its_items() -> (
    None
):
    from bench.rank.loaders.nvjpeg import ahead_pipeline

    def produce(i: int) -> worker.Batch:
        if i == 3:
            raise OSError("unreadable file")
        return torch.zeros(1), torch.tensor([i])

    pipeline = ahead_pipeline(iter(range(10)), produce, CPU)
    assert [next(pipeline)[1].item() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OSError, match="unreadable file"):
        next(pipeline)
    finite = ahead_pipeline(iter(range(4)), lambda i: (torch.zeros(1), torch.tensor([i])), CPU)
    assert [labels.item() for _, labels in finite] == [0, 1, 2, 3]


def test_ahead_pipeline_thread_ends_when_the_consumer_closes_it() -> None:
    import threading
    import time

    from bench.rank.loaders.nvjpeg import ahead_pipeline

    def endless() -> Iterator[int]:
        i = 0
        while True:
            yield i
            i += 1

    pipeline = ahead_pipeline(endless(), lambda i: (torch.zeros(1), torch.tensor([i])), CPU)
    next(pipeline)
    pipeline.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name == "batch-producer" for t in threading.enumerate()
    ):
        time.sleep(0.05)
    assert not any(t.name == "batch-producer" for t in threading.enumerate())


def test_too_few_images_for_a_batch_on_every_rank_is_an_error(jpeg_folder: Path) -> None:
    for loader in ("torch", "nvjpeg"):
        with pytest.raises(ValueError, match="24 images give no full batch of 8 on each of 4"):
            next(worker.make_batches(request_for(jpeg_folder, 0, 4, 0, batch=8), loader))


def test_loader_rate_counts_images_per_second_after_skipping_the_queue() -> None:
    pulled = []

    def batches() -> Iterator[worker.Batch]:
        while True:
            pulled.append(1)
            yield torch.zeros(5, 3, 2, 2), torch.zeros(5)

    rate = worker.loader_rate(batches(), max_batches=7, device=CPU, skip=3)
    assert len(pulled) == 10
    assert rate > 0 and math.isfinite(rate)
    pulled.clear()
    worker.loader_rate(batches(), max_batches=1000, device=CPU, max_seconds=0.0)
    assert len(pulled) == 1  # the time limit still takes one batch


# --- the registry: one entry per --loader name --------------------------------------------------


def test_each_registered_loader_is_reached_by_its_name() -> None:
    assert list(LOADERS) == ["torch", "nvimgcodec", "nvjpeg", "dali", "tfdata"]
    assert all(loader_named(name).name == name for name in LOADERS)
    # tf.data is the TensorFlow rank's own: a torch rank cannot build it
    with pytest.raises(ValueError, match="the tfdata loader feeds tensorflow ranks only"):
        loader_named("tfdata").queue_depth(3)
    # each name reaches its own module: the queue each holds ready differs
    assert loader_named("torch").queue_depth(3) == 3 * torch_loader.PREFETCH_FACTOR
    ahead = nvjpeg.AHEAD + 1  # queued by the producer thread, and the one it is producing
    assert loader_named("nvjpeg").queue_depth(3) == 3 * torch_loader.PREFETCH_FACTOR + ahead
    assert loader_named("nvjpeg").queue_depth(0) == ahead
    assert loader_named("nvimgcodec").queue_depth(3) == loader_named("nvjpeg").queue_depth(3)
    assert loader_named("dali").queue_depth(3) == 2  # DALI's own prefetch queue
    # dali's batches, reached by name, refuse a CPU device before touching DALI
    with pytest.raises(ValueError, match="the dali loader needs a CUDA device"):
        next(loader_named("dali").batches(request_for(Path("/nonexistent"), 0, 1, 0)))


def test_an_unknown_loader_name_is_an_error_that_names_the_choices(jpeg_folder: Path) -> None:
    choices = "unknown loader 'pil': choose from torch, nvimgcodec, nvjpeg, dali, tfdata"
    with pytest.raises(ValueError, match=choices):
        loader_named("pil")
    with pytest.raises(ValueError, match=choices):
        worker.make_batches(request_for(jpeg_folder, 0, 1, 0), "pil")
    assert loader_support.loader_problem("pil", "cpu", **facts()) == choices


def test_the_cli_offers_the_registered_loaders_and_refuses_others() -> None:
    from bench.options import build_parser, parse_request

    help_text = " ".join(build_parser().format_help().split())
    for loader in LOADERS.values():
        assert f"{loader.name} ({loader.summary})" in help_text
    assert parse_request(["--loader", "dali,torch"]).values["loader"] == ("dali", "torch")
    with pytest.raises(SystemExit):
        parse_request(["--loader", "pil"])


def test_the_default_order_ranks_every_registered_loader() -> None:
    torch_loaders = [x for x in LOADERS if LOADERS[x].framework == "torch"]
    assert sorted(loader_support.DEFAULT_ORDER) == sorted(torch_loaders)  # tf: tf.data always


def test_the_registry_and_the_loader_choice_import_no_torch() -> None:
    code = "import sys, bench.loader_support, bench.spec; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


# --- the loader choice on the controller --------------------------------------------------------


def facts(
    torch_major: int | None = 13, dali: tuple[int, ...] = (13,), decode: str | dict[str, str] = ""
) -> Any:
    """A machine's answers; `decode`: every GPU decoder's problem, or each one's by loader."""
    return {
        "torch_major": lambda: torch_major,
        "dali_majors": lambda: dali,
        "decode_problem": lambda loader: decode if isinstance(decode, str) else decode[loader],
    }


def test_refusal_reasons() -> None:
    problem = loader_support.loader_problem
    assert problem("torch", "cpu", **facts()) == ""
    assert "nvJPEG decodes on the GPU; this sweep runs on CPU" in problem(
        "nvjpeg", "cpu", **facts()
    )
    assert "nvImageCodec decodes on the GPU; this sweep runs on CPU" in problem(
        "nvimgcodec", "cpu", **facts()
    )
    assert "this sweep runs on CPU" in problem("dali", "cpu", **facts())
    assert "pip install nvidia-dali-cuda130" in problem("dali", "cuda", **facts(dali=()))
    mismatch = problem("dali", "cuda", **facts(torch_major=12, dali=(13,)))
    assert "built for CUDA 13 but torch for CUDA 12" in mismatch
    assert problem("dali", "cuda", **facts()) == ""
    broken = facts(decode="torchvision 0.28.0's compiled ops do not load")
    assert "compiled ops do not load" in problem("nvjpeg", "cuda", **broken)
    assert problem("nvjpeg", "cuda", **facts()) == ""
    missing = facts(decode={"nvimgcodec": "nvImageCodec is not installed", "nvjpeg": ""})
    assert problem("nvimgcodec", "cuda", **missing) == "nvImageCodec is not installed"
    assert problem("nvjpeg", "cuda", **missing) == ""


def test_default_is_the_first_runnable_in_order_and_torch_on_cpu() -> None:
    def machine(**kw: Any) -> Any:
        return lambda loader, device: loader_support.loader_problem(loader, device, **facts(**kw))

    resolve = loader_support.resolve_loaders
    assert resolve(None, "/data", "cuda", machine()) == ("dali",)
    assert resolve(None, "/data", "cuda", machine(dali=())) == ("nvimgcodec",)
    no_codec = machine(dali=(), decode={"nvimgcodec": "not installed", "nvjpeg": ""})
    assert resolve(None, "/data", "cuda", no_codec) == ("nvjpeg",)
    no_gpu_decode = machine(dali=(), decode="no")
    assert resolve(None, "/data", "cuda", no_gpu_decode) == ("torch",)
    assert resolve(None, "/data", "cpu", machine()) == ("torch",)
    assert resolve(None, "synthetic", "cuda", machine()) == (loader_support.NO_LOADER,)
    assert resolve(("torch", "dali"), "/data", "cuda", machine()) == ("torch", "dali")


def test_loader_errors_list_every_refusal_and_synthetic_takes_none() -> None:
    def cpu_only(loader: str, device: str) -> str:
        return loader_support.loader_problem(loader, device, **facts(dali=()))

    errors = loader_support.loader_errors(("torch", "nvjpeg", "dali"), "/data", "cpu", cpu_only)
    assert [e.split(":")[0] for e in errors] == ["--loader nvjpeg", "--loader dali"]
    assert (
        loader_support.loader_errors((loader_support.NO_LOADER,), "synthetic", "cpu", cpu_only)
        == []
    )
    refused = loader_support.loader_errors(("torch",), "synthetic", "cpu", cpu_only)
    assert "nothing to load" in refused[0]
    # tf.data feeds the tf launcher only: refused beside a torch launcher, fine on its own
    both = loader_support.loader_errors(
        ("tfdata",), "/data", "cpu", cpu_only, launchers=("ddp", "tf")
    )
    assert len(both) == 1 and "ddp cannot read it" in both[0]
    assert loader_support.loader_errors(("tfdata",), "/data", "cpu", cpu_only, ("tf",)) == []


def test_dali_wheel_names_give_their_cuda_major() -> None:
    names = {
        "nvidia-dali-cuda120": 120,
        "nvidia_dali_cuda130": 130,
        "nvidia-dali-nightly-cuda130": 130,
    }
    for name, digits in names.items():
        match = loader_support._DALI_WHEEL.match(name)
        assert match and int(match[1]) == digits
    assert loader_support._DALI_WHEEL.match("nvidia-dali-tf-plugin-cuda120") is None


def test_dali_pipeline_on_cpu_operators_shards_disjointly_and_reshuffles(
    jpeg_folder: Path,
) -> None:
    """The DALI pipeline with every operator on the CPU (no GPU here): arguments DALI accepts,
    output shape and normalisation, disjoint shards that change each epoch. Runs only where
    DALI is installed: scripts/test.sh installs it (nvidia-dali-cuda120, CPU operators only here),
    so under GPURIG_REQUIRE_ALL_TESTS=1 (CI) a missing DALI fails instead of skipping."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        if os.environ.get("GPURIG_REQUIRE_ALL_TESTS") == "1":
            pytest.fail("GPURIG_REQUIRE_ALL_TESTS=1 but NVIDIA DALI is not installed")
        pytest.skip("NVIDIA DALI is not installed (pip install nvidia-dali-cuda120)")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from bench.rank.loaders import dali

    _, samples = folder.list_images(jpeg_folder)
    files = [path for path, _ in samples]
    ids = list(range(len(files)))  # labels = file ids, to see which file each rank read

    def epochs(rank: int) -> list[set[int]]:
        pipeline = dali._pipeline(
            files,
            ids,
            16,
            rank,
            2,
            reader_seed=7,
            gpu=False,
            batch_size=4,
            num_threads=1,
            device_id=None,
            seed=1 + rank,
            prefetch_queue_depth=2,
        )
        iterator = DALIGenericIterator(
            [pipeline],
            ["images", "labels"],
            reader_name="reader",
            last_batch_policy=LastBatchPolicy.DROP,
            auto_reset=True,
        )
        seen = []
        for _ in range(2):
            epoch: set[int] = set()
            for out in iterator:
                assert out[0]["images"].shape == (4, 3, 16, 16)
                assert -3 < float(out[0]["images"].min()) < float(out[0]["images"].max()) < 3
                epoch |= set(out[0]["labels"].view(-1).tolist())
            seen.append(epoch)
        return seen

    rank0, rank1 = epochs(0), epochs(1)
    for epoch in range(2):
        assert not rank0[epoch] & rank1[epoch]
        assert len(rank0[epoch] | rank1[epoch]) == len(files)
    assert rank0[0] != rank0[1]


# --- the knob through the configuration ---------------------------------------------------------


def test_loader_knob_defaults_validates_and_names_the_runs(
    jpeg_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench_builders import MODELS, config_for, cpu_machine, gpu_machine

    from bench.admission import admit
    from bench.config import ConfigError
    from bench.spec import NO_LOADER, Variant

    real = ["--data", str(jpeg_folder)]
    assert config_for(real, cpu_machine()).axes["loader"] == ("torch",)
    assert config_for([], cpu_machine()).axes["loader"] == ("none",)
    # a GPU machine with DALI for torch's CUDA major takes DALI; without it nvImageCodec, then
    # nvJPEG, then torch
    monkeypatch.setattr(loader_support, "torch_cuda_major", lambda: 13)
    monkeypatch.setattr(loader_support, "dali_cuda_majors", lambda: (13,))
    monkeypatch.setattr(loader_support, "gpu_decode_problem", lambda loader: "")
    assert config_for(real, gpu_machine()).axes["loader"] == ("dali",)
    monkeypatch.setattr(loader_support, "dali_cuda_majors", lambda: ())
    assert config_for(real, gpu_machine()).axes["loader"] == ("nvimgcodec",)
    monkeypatch.setattr(loader_support, "gpu_decode_problem", lambda loader: "cannot decode")
    config = config_for([*real, "--loader", "torch,nvjpeg,dali"], gpu_machine())
    with pytest.raises(ConfigError) as refused:
        admit(config, gpu_machine(), MODELS)
    assert "--loader nvjpeg: cannot decode" in str(refused.value)
    assert "--loader dali: NVIDIA DALI is not installed" in str(refused.value)
    assert [v.label for v in config.variants()] == [
        "amp-bf16-nchw-torch",
        "amp-bf16-nchw-nvjpeg",
        "amp-bf16-nchw-dali",
    ]
    assert Variant("fp32", False, False, NO_LOADER).label == "fp32-nchw"


def test_report_sets_the_loader_rate_beside_the_model_and_marks_the_epoch_source() -> None:
    from bench_builders import run_row

    from bench.report.diagnosis import loader_section
    from bench.report.epochs import epoch_section
    from bench.report.summary import summarise

    def rows(loader_rate: float) -> list[Any]:
        return [
            run_row(
                run_id=f"ddp-n1-fp32-nchw-torch-r{i}",
                repeat=i,
                variant="fp32-nchw-torch",
                loader="torch",
                data="/data/train",
                throughput=64.0,
                throughput_per_gpu=64.0,
                loader_throughput_per_gpu=loader_rate,
                loader_throughput=loader_rate,
            )
            for i in range(2)
        ]

    starved = rows(60.0)
    (line,) = loader_section(summarise(starved, []))
    assert "the torch loader alone delivers 60 img/s per GPU" in line
    assert "the model consumed 64: the loader is the bottleneck" in line
    fed = rows(128.0)
    (line,) = loader_section(summarise(fed, []))
    assert "the model consumed 64: 2.0x that: input does not limit it" in line
    # Fast alone, yet the steps waited for data: the two competed for the GPU (nvjpeg on the
    # H100, docs/results/2026-11-26-h100), and the report must not call input harmless.
    shared = [replace(r, data_wait_fraction=0.41) for r in rows(128.0)]
    (line,) = loader_section(summarise(shared, []))
    assert "2.0x that alone, yet it fell behind while training" in line
    assert "does not limit" not in line
    synthetic = [run_row()]
    assert loader_section(summarise(synthetic, [])) == []
    points = summarise(fed, [])
    assert (
        "measured on real images from /data/train" in epoch_section(points, 1, (), "/data/train")[0]
    )
    assert "measured on synthetic data" in epoch_section(points, 1000, ())[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="states what a machine without a GPU says")
def test_gpu_decode_probe_runs_in_a_child_process_and_says_why() -> None:
    loader_support.gpu_decode_problem.cache_clear()
    for loader in loader_support.GPU_DECODERS:
        assert loader_support.gpu_decode_problem(loader) == "no CUDA device is visible"

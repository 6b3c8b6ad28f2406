"""Models (including the torchvision compiled-ops fallback) and the pieces of the rank loop."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from bench.rank import engines, worker
from bench.shared import models
from bench.shared.loaders import LoaderRequest
from bench.spec import NO_LOADER, SYNTHETIC


def fake_package(root: Path, init_body: str) -> str:
    """A package whose __init__ runs `init_body` and whose `models` subpackage is pure Python."""
    name = f"fakevision_{uuid.uuid4().hex[:8]}"
    package = root / name
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(init_body).replace("PKG", name))
    (package / "models" / "__init__.py").write_text("def list_models():\n    return ['tiny']\n")
    return name


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("fakevision_")]:
        del sys.modules[name]


def test_missing_compiled_ops_falls_back_to_the_pure_python_models(on_path: Path) -> None:
    name = fake_package(on_path, 'raise RuntimeError("operator PKG::nms does not exist")\n')
    package = models.import_package(name)
    assert package.__file__ and package.__file__.endswith("__init__.py")
    assert models.import_submodule("models", name).list_models() == ["tiny"]
    assert models._state[name] is False


def test_other_import_errors_propagate(on_path: Path) -> None:
    name = fake_package(on_path, 'raise RuntimeError("CUDA driver initialization failed")\n')
    with pytest.raises(RuntimeError, match="CUDA driver"):
        models.import_package(name)


def test_a_working_package_imports_normally(on_path: Path) -> None:
    name = fake_package(on_path, "LOADED = True\n")
    assert models.import_package(name).LOADED is True
    assert models._state[name] is True


def test_error_recognition() -> None:
    assert models.is_missing_compiled_ops_error(
        RuntimeError("operator torchvision::nms does not exist")
    )
    assert not models.is_missing_compiled_ops_error(ImportError("operator torchvision::nms"))
    assert not models.is_missing_compiled_ops_error(RuntimeError("something else"))


def test_torchvision_models_build_here() -> None:
    names = models.available_models()
    assert {"resnet50", "resnet18", "vit_b_16"} <= set(names)
    assert "fasterrcnn_resnet50_fpn" not in names  # classification models only
    net = models.build_model("resnet18", num_classes=10)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    # ResNet-50 has 25,557,032 parameters: 102.2 MB of fp32 gradients
    assert models.gradient_bytes(models.build_model("resnet50")) == 25_557_032 * 4


def input_request(root: str, **fields: Any) -> LoaderRequest:
    defaults: dict[str, Any] = dict(
        batch=4,
        image_size=32,
        num_classes=10,
        workers=0,
        rank=0,
        world_size=1,
        device=torch.device("cpu"),
        memory_format=torch.channels_last,
        seed=1,
    )
    return LoaderRequest(root=root, **(defaults | fields))


def test_synthetic_batches_are_on_device_in_the_memory_format() -> None:
    batches = worker.make_batches(input_request(SYNTHETIC), NO_LOADER)
    images, labels = next(batches)
    assert images.shape == (4, 3, 32, 32) and labels.shape == (4,)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert int(labels.max()) < 10
    assert next(batches)[0] is images  # made once, reused
    # each rank draws its own batch from the run's seed
    other_rank = next(worker.make_batches(input_request(SYNTHETIC, rank=1), NO_LOADER))[0]
    assert not torch.equal(other_rank, images)
    assert torch.equal(next(worker.synthetic_batches(input_request(SYNTHETIC)))[0], images)


def test_loader_request_carries_the_spec_and_the_ranks_place(tmp_path: Path) -> None:
    from bench_builders import config_for, cpu_machine

    from bench.plan import local_placement, plan_sweep

    argv = [
        "--data",
        str(tmp_path),
        "--loader",
        "nvjpeg",
        "--image-size",
        "40",
        "--workers",
        "3",
        "--seed",
        "7",
        "--num-classes",
        "9",
        "--memory-format",
        "channels_last",
    ]
    spec = plan_sweep(config_for(argv, cpu_machine()), "s", local_placement(2), 2)[-1]
    # DataParallel-like: one process driving 3 devices consumes 3 GPUs' share of a batch
    info = engines.DistInfo(
        rank=1, world_size=2, local_rank=1, device=torch.device("cpu"), backend="gloo", devices=3
    )
    assert worker.loader_request(spec, info) == LoaderRequest(
        root=str(tmp_path),
        batch=spec.batch_per_gpu * 3,
        image_size=40,
        num_classes=9,
        workers=3,
        rank=1,
        world_size=2,
        device=torch.device("cpu"),
        memory_format=torch.channels_last,
        seed=7,
    )
    nchw = dataclasses.replace(spec, variant=dataclasses.replace(spec.variant, channels_last=False))
    assert worker.loader_request(nchw, info).memory_format == torch.contiguous_format


def test_imagefolder_batches(tmp_path: Path) -> None:
    from PIL import Image

    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(6):
            Image.new("RGB", (40, 30), (i * 20, 0, 0)).save(tmp_path / cls / f"{i}.png")
    request = input_request(str(tmp_path), batch=2, image_size=24, rank=1, world_size=2)
    batches = worker.make_batches(request, "torch")
    shapes = [tuple(next(batches)[0].shape) for _ in range(5)]  # 3 batches per epoch: wraps
    assert shapes == [(2, 3, 24, 24)] * 5
    with pytest.raises(ValueError, match="no full batch"):
        next(worker.make_batches(dataclasses.replace(request, batch=7, rank=0), "torch"))


class LocalEngine:
    """The Engine protocol for one process, without a process group."""

    def step(self, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> None:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)


@pytest.mark.parametrize("precision", ["fp32", "amp-bf16", "amp-fp16"])
def test_train_step_updates_the_model(precision: str) -> None:
    torch.manual_seed(0)
    net = models.build_model("resnet18", num_classes=4)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    step = worker.make_train_step(net, optimizer, LocalEngine(), precision, torch.device("cpu"))
    before = net.fc.weight.detach().clone()
    # fp16's GradScaler skips steps whose scaled gradients overflow while it finds its scale
    for _ in range(30):
        step(torch.randn(2, 3, 32, 32), torch.tensor([0, 3]))
        if not torch.equal(before, net.fc.weight):
            break
    assert not torch.equal(before, net.fc.weight)


def test_timed_window_accounts_every_step_and_the_data_wait() -> None:
    calls: list[int] = []

    def slow_batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            time.sleep(0.01)
            yield torch.zeros(1), torch.zeros(1)

    window, steps, wait = worker.timed_window(
        lambda x, y: calls.append(1), slow_batches(), 4, torch.device("cpu")
    )
    assert len(calls) == 4 and len(steps) == 4
    assert sum(steps) == pytest.approx(window)  # steps tile the window exactly
    assert wait >= 0.04  # four sleeps of 10 ms inside next()
    assert wait <= window


def test_fp32_means_ieee_unless_tf32_is_asked_for() -> None:
    worker.configure_fp32_math("tf32")
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    worker.configure_fp32_math("fp32")
    assert torch.backends.cudnn.conv.fp32_precision == "ieee"
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"


def test_exit_rank_flushes_what_the_rank_printed_and_keeps_the_code() -> None:
    # A rank leaves with os._exit (no interpreter finalization, see lifeline.exit_rank): its
    # buffered output (the report on stdout, warnings on stderr) must still arrive.
    code = (
        "import sys; from bench.shared.lifeline import exit_rank; "
        "print('report', end=''); print('warned', end='', file=sys.stderr); exit_rank(3)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (3, "report", "warned")

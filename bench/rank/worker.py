"""The per-rank training loop: `python -m bench.rank.worker --spec <encoded RunSpec>`.

Started by torchrun (DDP), horovodrun (Horovod) or directly (DataParallel: one process for all
GPUs); bench.rank.engines holds the only lines that differ. Warm-up steps run untimed; then every
rank times the same number of steps, and rank 0 gathers all ranks' timings and prints them for
the launcher (bench.shared.wire). With --profile, a few more steps after the timed window are
traced (bench.rank.profiling); NVTX ranges mark the phases and steps on GPUs.

Input: synthetic batches (the default, like the reference harnesses) or an ImageFolder read by
one of the loaders in `bench.rank.loaders` (torch, nvjpeg, dali). Every source is an endless
iterator of (images, labels) already on the training device in the run's memory format. The loop
times `next()` on it separately from the step, so a starved GPU shows up as data wait rather
than as slow training, and `loader_rate` measures the loader alone (no model) so the report can
set what the loader delivers beside what the model consumes.
"""

from __future__ import annotations

import itertools
import os
import resource
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from bench.rank import engines, faults, timing
from bench.rank.affinity import pin_rank
from bench.rank.checkpointing import checkpoint_stages
from bench.rank.profiling import nvtx_range, profile_steps, synchronize
from bench.shared import wire
from bench.shared.lifeline import exit_rank
from bench.shared.loaders import LoaderRequest, loader_named
from bench.shared.models import build_model, gradient_bytes
from bench.shared.telemetry import GpuSampler, merge_telemetry
from bench.spec import SYNTHETIC, RunSpec, Variant

AMP_DTYPES = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}


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


def configure_fp32_math(precision: str) -> None:
    """TF32 only when asked: "fp32" means IEEE fp32 (cuDNN would otherwise default to TF32)."""
    mode = "tf32" if precision == "tf32" else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        torch.backends.cudnn.allow_tf32 = mode == "tf32"


def micro_batches(batches: Iterator[Batch], count: int) -> Iterator[Batch]:
    """Each optimizer step's `count` batches as one item: (images tuple, labels tuple)."""
    while True:
        group = [next(batches) for _ in range(count)]
        yield tuple(b[0] for b in group), tuple(b[1] for b in group)  # type: ignore[misc]


def make_train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    engine: engines.Engine,
    precision: str,
    device: torch.device,
) -> Callable[[Any, Any], None]:
    """One optimizer step over a step's micro-batches (see micro_batches): each backward pass
    but the last accumulates without an allreduce; the loss is divided by their number, so the
    reduced gradient is the mean over every image of the step, as with one large batch."""
    amp_dtype = AMP_DTYPES.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "amp-fp16" else None
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(images: Any, labels: Any) -> None:
        if isinstance(images, torch.Tensor):  # one batch, no accumulation
            images, labels = (images,), (labels,)
        optimizer.zero_grad()  # torch >= 2.0 sets grads to None (Horovod takes no argument)
        last = len(images) - 1
        for i, (x, y) in enumerate(zip(images, labels, strict=True)):
            with engine.no_sync(model) if i < last else nullcontext():
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    output = model(x)
                    logits = output if isinstance(output, torch.Tensor) else output[0]  # aux
                    loss = loss_fn(logits, y) / len(images) if last else loss_fn(logits, y)
                (scaler.scale(loss) if scaler else loss).backward()
        engine.step(optimizer, scaler)
        if scaler:
            scaler.update()

    return train_step


def timed_window(
    train_step: Callable[[torch.Tensor, torch.Tensor], None],
    batches: Iterator[Batch],
    steps: int,
    device: torch.device,
) -> tuple[float, list[float], float]:
    """(window seconds, per-step seconds, seconds waiting for data) of `steps` steps.

    On a GPU, step boundaries are CUDA events (no per-step synchronisation, so the host keeps
    queueing work ahead as in real training) and the window ends after a final synchronize.
    """
    cuda = device.type == "cuda"
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)] if cuda else []
    marks = [time.perf_counter()]
    if cuda:
        events[0].record()
    data_wait = 0.0
    for i in range(steps):
        with nvtx_range(f"step {i}", device):
            before = time.perf_counter()
            images, labels = next(batches)
            data_wait += time.perf_counter() - before
            train_step(images, labels)
        if cuda:
            events[i + 1].record()
        else:
            marks.append(time.perf_counter())
    if cuda:
        torch.cuda.synchronize(device)
        window = time.perf_counter() - marks[0]
        return window, [a.elapsed_time(b) / 1e3 for a, b in itertools.pairwise(events)], data_wait
    return marks[-1] - marks[0], [b - a for a, b in itertools.pairwise(marks)], data_wait


def peak_memory_bytes(device: torch.device) -> int:
    """Peak allocated device memory on a GPU; the process's peak RSS on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class Training:
    """What a rank trains with: the step, its input (one item per step) and the raw loader."""

    train_step: Callable[[Any, Any], None]
    batches: Iterator[Batch]
    loader: Iterator[Batch]
    gradient_bytes: int


def memory_format_of(variant: Variant) -> torch.memory_format:
    return torch.channels_last if variant.channels_last else torch.contiguous_format


def loader_request(spec: RunSpec, info: engines.DistInfo) -> LoaderRequest:
    """What this rank asks of its input, from the run's spec and the rank's place."""
    load = spec.workload
    return LoaderRequest(
        root=load.data,
        batch=spec.batch_per_gpu * info.devices,  # DataParallel's one process: every GPU's share
        image_size=load.image_size,
        num_classes=load.num_classes,
        workers=load.loader_workers,
        rank=info.rank,
        world_size=info.world_size,
        device=info.device,
        memory_format=memory_format_of(spec.variant),
        seed=load.seed,
    )


def set_up(spec: RunSpec, engine: engines.Engine, info: engines.DistInfo) -> Training:
    """The model on its device, wrapped by the engine (and compiled), its optimizer and input."""
    load, variant = spec.workload, spec.variant
    configure_fp32_math(variant.precision)
    # Input shapes never change within a run: let cuDNN time its algorithms once and keep the
    # fastest (what a tuned training job does; the plain loop in benchmarks/overhead.py too).
    torch.backends.cudnn.benchmark = info.device.type == "cuda"
    memory_format = memory_format_of(variant)
    model = build_model(load.model, load.num_classes)
    if variant.activation_checkpointing:
        checkpoint_stages(model)
    model = model.to(info.device, memory_format=memory_format)
    grad_bytes = gradient_bytes(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = engine.wrap(model, optimizer)
    if variant.compile:
        model = engine.compile(model)
    train_step = make_train_step(model, optimizer, engine, variant.precision, info.device)
    loader = make_batches(loader_request(spec, info), variant.loader)
    batches = micro_batches(loader, variant.grad_accum)  # one item per optimizer step
    return Training(train_step, batches, loader, grad_bytes)


def settle(
    spec: RunSpec, engine: engines.Engine, info: engines.DistInfo, training: Training
) -> tuple[float | None, int, int]:
    """bench.rank.timing.settle over this rank's steps: (compile seconds or None, steps run
    before the window, steps to time)."""
    train_step, batches, device = training.train_step, training.batches, info.device
    return timing.settle(
        lambda: train_step(*next(batches)),
        lambda steps: timed_window(train_step, batches, steps, device)[1],
        engine.gather,
        spec.workload,
        spec.variant.compile,
        finish=lambda: synchronize(device),
        phase=lambda name: nvtx_range(name, device),
    )


def after_window(
    spec: RunSpec,
    engine: engines.Engine,
    info: engines.DistInfo,
    training: Training,
    timed_steps: int,
) -> tuple[float | None, dict[str, Any] | None]:
    """What runs after the timed window, all ranks together: real data's loader alone (its
    img/s) and the --profile steps (rank 0's trace summary)."""
    loader_images_per_s = profile = None
    if spec.workload.data != SYNTHETIC:  # the loader alone (no model): its ceiling
        engine.barrier()
        with nvtx_range("loader only", info.device):
            loader_images_per_s = loader_rate(
                training.loader,
                timed_steps,
                info.device,
                skip=loader_named(spec.variant.loader).queue_depth(spec.workload.loader_workers),
            )
    if spec.trace_path:  # rank 0 records, every rank steps (collectives stay matched)
        engine.barrier()
        profile = profile_steps(
            training.train_step,
            training.batches,
            info.device,
            spec.trace_path if info.rank == 0 and not info.slot else "",  # per-gpu: slot 0
        )
    return loader_images_per_s, profile


def main(argv: list[str] | None = None) -> int:
    spec = RunSpec.from_argv(argv, __doc__)
    torch.set_num_threads(spec.threads_per_rank)
    torch.manual_seed(spec.workload.seed)
    engine = engines.create(spec.launcher, spec.workload, spec.variant.grad_accum, spec.world_size)
    info = engine.init(spec.workload.device)
    if spec.variant.cpu_affinity:  # before the loader's workers and threads start: they inherit it
        pinned = pin_rank(info.local_rank, info.local_size, info.devices, info.device.type)
        if pinned:  # threads_per_rank was the node's cores / its ranks: use the pinned share
            torch.set_num_threads(len(pinned))
    training = set_up(spec, engine, info)
    compile_s, warmup_steps, timed_steps = settle(spec, engine, info, training)
    fault = faults.fault_for(info.rank if info.slot is None else info.slot)
    faults.trigger(fault)
    train_step = faults.slowed(training.train_step, fault)
    if info.device.type == "cuda":
        torch.cuda.synchronize(info.device)
        torch.cuda.reset_peak_memory_stats(info.device)
    engine.barrier()  # every rank starts its window together
    gpus = range(info.local_rank, info.local_rank + info.devices)  # DataParallel: all of them
    samplers = [GpuSampler(g if info.device.type == "cuda" else None).start() for g in gpus]
    with nvtx_range("timed window", info.device):
        window, step_s, data_wait = timed_window(
            train_step, training.batches, timed_steps, info.device
        )
    telemetry = merge_telemetry([s.stop() for s in samplers])
    loader_images_per_s, profile = after_window(spec, engine, info, training, timed_steps)
    report = wire.RankReport(
        rank=info.rank,
        local_rank=info.local_rank,
        host=socket.gethostname(),
        device_name=(
            torch.cuda.get_device_name(info.device) if info.device.type == "cuda" else "cpu"
        ),
        window_s=window,
        step_s=step_s,
        data_wait_s=data_wait,
        peak_memory_bytes=peak_memory_bytes(info.device),
        telemetry=telemetry,
        compile_s=compile_s,
        warmup_steps=warmup_steps,
        loader_images_per_s=loader_images_per_s,
        profile=profile,
        runtime=wire.runtime(torch=torch.__version__, torch_path=os.path.dirname(torch.__file__)),
        cpu_cores=len(os.sched_getaffinity(0)),
    )
    images_per_step = spec.batch_per_gpu * info.devices * spec.variant.grad_accum
    run = wire.RunReport(
        run_id=spec.run_id,
        backend=info.backend,
        world_size=info.world_size,
        gradient_bytes=training.gradient_bytes,
        images_per_rank=images_per_step * timed_steps,
        timed_steps=timed_steps,
    )
    wire.send(engine.gather, report, run, first=info.rank == 0, slot=info.slot)
    del training  # release the model and loader (its worker processes) before exit_rank
    engine.shutdown()
    return 0


if __name__ == "__main__":
    exit_rank(main())

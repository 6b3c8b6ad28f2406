"""The per-rank training loop: `python -m bench.worker --spec <encoded RunSpec>`.

Started by torchrun (DDP) or horovodrun (Horovod); bench.engines holds the only lines that
differ. Warm-up steps run untimed; then every rank times the same number of steps, and rank 0
gathers all ranks' timings and prints them for the launcher (bench.wire).
"""

from __future__ import annotations

import argparse
import itertools
import resource
import socket
import time
from collections.abc import Callable, Iterator

import torch

from bench import engines, faults, wire
from bench.data import Batch, make_batches
from bench.models import build_model, gradient_bytes
from bench.plan import RunSpec
from bench.sysinfo import GpuSampler

AMP_DTYPES = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}


def configure_fp32_math(precision: str) -> None:
    """TF32 only when asked: "fp32" means IEEE fp32 (cuDNN would otherwise default to TF32)."""
    mode = "tf32" if precision == "tf32" else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        torch.backends.cudnn.allow_tf32 = mode == "tf32"


def make_train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    engine: engines.Engine,
    precision: str,
    device: torch.device,
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    amp_dtype = AMP_DTYPES.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "amp-fp16" else None
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(images: torch.Tensor, labels: torch.Tensor) -> None:
        optimizer.zero_grad()  # torch >= 2.0 sets grads to None (Horovod takes no argument)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            output = model(images)
            logits = output if isinstance(output, torch.Tensor) else output[0]  # aux heads
            loss = loss_fn(logits, labels)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="RunSpec.encode() of the run")
    spec = RunSpec.decode(parser.parse_args(argv).spec)
    load, variant = spec.workload, spec.variant
    torch.set_num_threads(spec.threads_per_rank)
    torch.manual_seed(load.seed)
    engine = engines.create(spec.launcher)
    info = engine.init(load.device)
    configure_fp32_math(variant.precision)
    memory_format = torch.channels_last if variant.channels_last else torch.contiguous_format
    model = build_model(load.model, load.num_classes).to(info.device, memory_format=memory_format)
    grad_bytes = gradient_bytes(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer = engine.wrap(model, optimizer, load)
    if variant.compile:
        model = torch.compile(model)
    train_step = make_train_step(model, optimizer, engine, variant.precision, info.device)
    batches = make_batches(
        load.data, spec.batch_per_gpu, load.image_size, load.num_classes, load.loader_workers,
        info.rank, info.world_size, info.device, memory_format, load.seed,
    )  # fmt: skip

    for _ in range(load.warmup_steps):
        train_step(*next(batches))
    faults.trigger(faults.fault_for(info.rank))
    if info.device.type == "cuda":
        torch.cuda.synchronize(info.device)
        torch.cuda.reset_peak_memory_stats(info.device)
    engine.barrier()  # every rank starts its window together
    sampler = GpuSampler(info.local_rank if info.device.type == "cuda" else None).start()
    window, step_s, data_wait = timed_window(train_step, batches, load.timed_steps, info.device)
    telemetry = sampler.stop()

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
    )
    reports = engine.gather(report)
    if info.rank == 0:
        run = wire.RunReport(
            run_id=spec.run_id,
            backend=info.backend,
            world_size=info.world_size,
            gradient_bytes=grad_bytes,
            images_per_rank=spec.batch_per_gpu * load.timed_steps,
            ranks=reports,
        )
        wire.emit(spec.run_id, run.to_dict())
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

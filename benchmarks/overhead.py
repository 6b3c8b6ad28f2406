"""Harness overhead: the bench's per-rank loop vs a minimal stand-alone training loop.

    python benchmarks/overhead.py [--launcher ddp|horovod] [--ranks 2] [--rounds 5]
        [--model resnet50] [--batch-size 8] [--image-size 32] [--steps 20] [--warmup 3]
        [--precision fp32|tf32|amp-fp16|amp-bf16] [--memory-format nchw|channels_last]
        [--compile off|on] [--device cpu|cuda]

Both loops do the same work: the same model, synthetic batch, ranks, threads and launcher
(torchrun with c10d rendezvous for DDP, horovodrun for Horovod), the same math mode (fp32 means
IEEE fp32 on both sides, tf32 TF32 on both; AMP with the same dtype and, for fp16, a GradScaler),
the same memory format, DDP's knobs at the bench's defaults, cuDNN autotuning on a GPU, and, with
--compile on, torch.compile in the same arrangement (one graph under DDP). Both define img/s the
same way: global images of the timed steps / the slowest rank's wall time. Launches alternate
(harness first in even rounds, minimal first in odd ones) so drift on a shared machine hits both
alike. The script prints every round and the ratio of the medians; the target is >= 0.98 (no
measurable overhead).

This is a measurement, not a test: run it on a quiet machine and read the ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from bench import rows  # noqa: E402
from bench.launchers import Launch  # noqa: E402
from bench.launchers.local import LocalLauncher, execute  # noqa: E402
from bench.machine import cpu_cores  # noqa: E402
from bench.plan import local_placement, threads_per_rank  # noqa: E402
from bench.spec import NO_LOADER, RunSpec, Variant, Workload, knobs  # noqa: E402

MINIMAL_MARK = "MINIMAL_IMG_S"
# DDP's knobs (and fp16 gradient compression), both loops at the bench's defaults
DDP_KNOBS = {
    name: k
    for name, k in knobs(Workload)
    if name
    in (
        "bucket_cap_mb",
        "static_graph",
        "gradient_as_bucket_view",
        "broadcast_buffers",
        "fp16_allreduce",
    )
}
AMP = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}


def minimal_loop(args: argparse.Namespace) -> None:
    """The reference: what anyone would write to time data-parallel training, and nothing more
    (with Horovod, plus the row-major views channels_last needs: bench.rank.layout)."""
    import torch

    from bench.rank.worker import configure_fp32_math
    from bench.shared.models import build_model

    cuda = args.device == "cuda"
    horovod = args.launcher == "horovod"
    if horovod:
        import horovod.torch as hvd

        hvd.init()
        local_rank, rank, world = hvd.local_rank(), hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist

        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    configure_fp32_math(args.precision)
    torch.backends.cudnn.benchmark = cuda
    layout = (
        torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
    )
    torch.manual_seed(0)
    model = build_model(args.model).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if horovod:
        from bench.rank import layout as row_major

        row_major.broadcast_in_place(hvd, model.state_dict())
        optimizer = hvd.DistributedOptimizer(
            optimizer,
            named_parameters=model.named_parameters(),
            compression=row_major.RowMajorCompression(hvd.Compression.none),
        )
    else:
        from torch.nn.parallel import DistributedDataParallel

        from bench.rank.engines import ddp_options

        # DDP's knobs at the bench's defaults, as the harness runs (harness_spec)
        options = ddp_options(vars(harness_spec(args, 0).workload))
        model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None, **options)
    if args.compile == "on":
        import torch._dynamo

        torch._dynamo.config.optimize_ddp = False
        model = torch.compile(model)
    amp_dtype = getattr(torch, AMP[args.precision]) if args.precision in AMP else None
    scaler = torch.amp.GradScaler(device.type) if args.precision == "amp-fp16" else None
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss = loss_fn(model(images), labels)
        if scaler is None:
            loss.backward()
            optimizer.step()
            return
        scaler.scale(loss).backward()
        if horovod:
            optimizer.synchronize()
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
        else:
            scaler.step(optimizer)
        scaler.update()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    hvd.barrier() if horovod else dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if horovod:
        window = float(max(hvd.allgather_object(elapsed)))
    else:
        slowest = torch.tensor([elapsed], device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        window = slowest.item()
    if rank == 0:
        print(f"{MINIMAL_MARK} {args.batch_size * args.steps * world / window:.6f}", flush=True)
    hvd.shutdown() if horovod else dist.destroy_process_group()


def harness_spec(args: argparse.Namespace, round_index: int) -> RunSpec:
    return RunSpec(
        sweep_id="overhead",
        run_id=f"harness-{round_index}",
        launcher=args.launcher,
        repeat=round_index,
        placement=local_placement(args.ranks),
        variant=Variant(
            precision=args.precision,
            channels_last=args.memory_format == "channels_last",
            compile=args.compile == "on",
            loader=NO_LOADER,  # synthetic data, made on the device
        ),
        workload=Workload(
            model=args.model,
            image_size=args.image_size,
            num_classes=1000,
            data="synthetic",
            loader_workers=0,
            warmup_steps=args.warmup,
            timed_steps=args.steps,
            **{name: DDP_KNOBS[name].default for name in DDP_KNOBS},
            device=args.device,
            seed=0,
            timed_seconds=0.0,  # fixed step counts, as in the minimal loop
            compile_ddp_split=False,
            profile=False,
        ),
        batch_per_gpu=args.batch_size,
        scaling="weak",
        threads_per_rank=threads_per_rank(cpu_cores(), args.ranks),
        trace_path="",  # no profiler trace: the harness's loop is what is timed
    )


def run_harness(args: argparse.Namespace, round_index: int, logs: Path) -> float:
    spec = harness_spec(args, round_index)
    result = LocalLauncher().run(spec, 900, logs / f"harness-{round_index}.log")
    row = rows.run_row(spec, result, rows.now_iso())
    if row.throughput is None:
        raise RuntimeError(f"harness run failed: {row.error}")
    return float(row.throughput)


def run_minimal(args: argparse.Namespace, round_index: int, logs: Path) -> float:
    """The minimal loop, started exactly like the harness: the same launcher command and
    environment, with this file as the rank's module."""
    spec = harness_spec(args, round_index)
    forwarded = ["--minimal", "--launcher", args.launcher, "--model", args.model,
                 "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
                 "--steps", str(args.steps), "--warmup", str(args.warmup),
                 "--precision", args.precision, "--memory-format", args.memory_format,
                 "--compile", args.compile, "--device", args.device]  # fmt: skip
    launch = Launch(f"minimal-{round_index}", args.launcher, "overhead", tuple(forwarded),
                    spec.placement, spec.threads_per_rank, args.device)  # fmt: skip
    command = LocalLauncher().command(launch)
    env = {**command.env, "PYTHONPATH": os.pathsep.join([str(HERE), command.env["PYTHONPATH"]])}
    result = execute(command.argv, env, 900, logs / f"minimal-{round_index}.log")
    found = re.search(rf"{MINIMAL_MARK} ([0-9.]+)", result.output)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"minimal run failed:\n{result.output[-2000:]}")
    return float(found[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=("ddp", "horovod"), default="ddp")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--precision", choices=("fp32", "tf32", *AMP), default="fp32")
    parser.add_argument("--memory-format", choices=("nchw", "channels_last"), default="nchw")
    parser.add_argument("--compile", choices=("off", "on"), default="off")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--minimal", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.minimal:
        minimal_loop(args)
        return 0

    harness: list[float] = []
    minimal: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        logs = Path(tmp)
        print(
            f"{args.launcher}: {args.model} {args.image_size}px, batch {args.batch_size}/rank, "
            f"{args.ranks} ranks on {args.device}, {args.precision} {args.memory_format}, "
            f"compile {args.compile}, {args.steps} timed steps, {args.rounds} rounds"
        )
        print(f"{'round':>5} {'harness img/s':>14} {'minimal img/s':>14} {'ratio':>7}")
        for i in range(args.rounds):
            order = (run_harness, run_minimal) if i % 2 == 0 else (run_minimal, run_harness)
            got = {fn: fn(args, i, logs) for fn in order}
            harness.append(got[run_harness])
            minimal.append(got[run_minimal])
            print(
                f"{i:>5} {harness[-1]:>14.2f} {minimal[-1]:>14.2f} "
                f"{harness[-1] / minimal[-1]:>7.3f}",
                flush=True,
            )
    ratio = statistics.median(harness) / statistics.median(minimal)
    paired = statistics.geometric_mean([h / m for h, m in zip(harness, minimal, strict=True)])
    print(
        f"median harness {statistics.median(harness):.2f} img/s, median minimal "
        f"{statistics.median(minimal):.2f} img/s"
    )
    print(
        f"harness / minimal = {ratio:.3f} (ratio of medians), {paired:.3f} (geometric mean of "
        f"paired rounds); target >= 0.98"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

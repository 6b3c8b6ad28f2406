"""Harness overhead: the bench's per-rank loop vs a minimal stand-alone DDP training loop.

    python benchmarks/overhead.py [--ranks 2] [--rounds 5] [--model resnet50] [--batch-size 8]
                                  [--image-size 32] [--steps 20] [--warmup 3] [--device cpu]

Both loops train the same model on the same synthetic batch with the same ranks, threads and
launcher (torchrun, c10d rendezvous), and both define img/s the same way: global images of the
timed steps / the slowest rank's wall time. Launches alternate (harness first in even rounds,
minimal first in odd ones) so drift on a shared machine hits both alike. The script prints
every round and the ratio of the medians; the target is >= 0.98 (no measurable overhead).

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

from bench import collect, launch  # noqa: E402
from bench.plan import RunSpec, Variant, Workload, local_placement, threads_per_rank  # noqa: E402
from bench.sysinfo import cpu_cores  # noqa: E402

MINIMAL_MARK = "MINIMAL_IMG_S"


def minimal_loop(args: argparse.Namespace) -> None:
    """The reference: what anyone would write to time DDP training, and nothing more."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from bench.models import build_model

    cuda = args.device == "cuda"
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    torch.manual_seed(0)
    model = DistributedDataParallel(
        build_model(args.model).to(device), device_ids=[local_rank] if cuda else None
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        loss_fn(model(images), labels).backward()
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    window = torch.tensor([time.perf_counter() - start], device=device)
    dist.all_reduce(window, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        images_total = args.batch_size * args.steps * dist.get_world_size()
        print(f"{MINIMAL_MARK} {images_total / window.item():.6f}", flush=True)
    dist.destroy_process_group()


def harness_spec(args: argparse.Namespace, round_index: int) -> RunSpec:
    return RunSpec(
        sweep_id="overhead",
        run_id=f"harness-{round_index}",
        launcher="ddp",
        repeat=round_index,
        placement=local_placement(args.ranks),
        variant=Variant(precision="fp32", channels_last=False, compile=False),
        workload=Workload(
            model=args.model,
            image_size=args.image_size,
            num_classes=1000,
            data="synthetic",
            loader_workers=0,
            warmup_steps=args.warmup,
            timed_steps=args.steps,
            bucket_cap_mb=25.0,
            static_graph=False,
            gradient_as_bucket_view=False,
            broadcast_buffers=True,
            fp16_allreduce=False,
            device=args.device,
            seed=0,
        ),
        batch_per_gpu=args.batch_size,
        scaling="weak",
        threads_per_rank=threads_per_rank(cpu_cores(), args.ranks),
    )


def run_harness(args: argparse.Namespace, round_index: int, logs: Path) -> float:
    spec = harness_spec(args, round_index)
    result = launch.run_local(
        launch.commands_for_run(spec), 600, logs / f"harness-{round_index}.log"
    )
    row = collect.run_row(spec, result, collect.now_iso())
    if row.throughput is None:
        raise RuntimeError(f"harness run failed: {row.error}")
    return row.throughput


def run_minimal(args: argparse.Namespace, round_index: int, logs: Path) -> float:
    """The minimal loop, started exactly like the harness: torchrun with the same environment."""
    spec = harness_spec(args, round_index)
    env = {
        **launch.rank_environment(spec.threads_per_rank, args.device),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)]),
    }
    forwarded = [
        "--minimal",
        "--model",
        args.model,
        "--batch-size",
        str(args.batch_size),
        "--image-size",
        str(args.image_size),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--device",
        args.device,
    ]
    (command,) = launch.torchrun_commands(
        spec.placement, "overhead", forwarded, rdzv_id=f"minimal-{round_index}",
        rdzv_endpoint=f"localhost:{launch.free_port()}", env=env, tools=launch.Tools(),
    )  # fmt: skip
    result = launch.run_local([command], 600, logs / f"minimal-{round_index}.log")
    found = re.search(rf"{MINIMAL_MARK} ([0-9.]+)", result.output)
    if result.returncode != 0 or found is None:
        raise RuntimeError(f"minimal run failed:\n{result.output[-2000:]}")
    return float(found[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
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
            f"{args.model} {args.image_size}px, batch {args.batch_size}/rank, {args.ranks} "
            f"ranks on {args.device}, {args.steps} timed steps, {args.rounds} rounds"
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

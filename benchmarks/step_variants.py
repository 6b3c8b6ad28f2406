"""What a one-GPU ResNet-50 training step can reach: a plain loop in named variants, A/B'd.

    python benchmarks/step_variants.py [--variants base,fused,graphs,...] [--batch-size 256]
        [--steps 60] [--windows 3] [--limit 240]

The plain loop every variant shares: torchvision's model at 224 px on the GPU, amp-bf16,
channels_last, cuDNN autotuning, SGD with momentum, one synthetic batch made once, loss
outside the compiled model (as in bench.rank.worker and benchmarks/overhead.py). A variant
changes one thing: the optimizer's implementation, torch.compile's mode (CUDA graphs, Inductor's
autotuning), the batch, or the wrapper (DDP over a one-rank NCCL group, with or without its
knobs). Each variant runs in a process of its own, one after the other (compile state never
leaks from one to the next), warms up untimed (its compile included), then times `--windows`
windows of `--steps` steps with CUDA events. The table gives each variant's best and median
window in img/s and its ratio to the first variant. Run it on a quiet machine and read the
ratios; the first variant is repeated last to show the drift between the two ends.

This is a measurement of how far a plain loop can go (the 6,300 img/s "moonshot"), not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

MARK = "STEP_VARIANT "


# The APIs the variants use, as documented (checked 2026-11-26): torch.optim.SGD's `fused` flag
# (torch/optim/sgd.py; at::_fused_sgd_ in the C++ API docs) and torch.compile's modes
# "reduce-overhead" (CUDA graphs) and "max-autotune-no-cudagraphs" (docs.pytorch.org,
# torch.compile).
@dataclass(frozen=True)
class Setup:
    fused: bool = False  # torch.optim.SGD(fused=True): one kernel per step for every parameter
    mode: str = "default"  # torch.compile mode ("" = eager)
    batch: int = 0  # 0: --batch-size
    ddp: bool = False  # DistributedDataParallel over a one-rank NCCL group (the bench's DDP)
    bucket_view: bool = False  # DDP gradient_as_bucket_view=True
    no_broadcast: bool = False  # DDP broadcast_buffers=False
    compile_optimizer: bool = False  # torch.compile(optimizer.step) as well


VARIANTS: dict[str, Setup] = {
    "base": Setup(),
    "eager": Setup(mode=""),
    "fused": Setup(fused=True),
    "compiled-optimizer": Setup(compile_optimizer=True),
    "graphs": Setup(mode="reduce-overhead"),
    "graphs-fused": Setup(mode="reduce-overhead", fused=True),
    "autotune": Setup(mode="max-autotune-no-cudagraphs"),
    "b384": Setup(batch=384),
    "b512": Setup(batch=512),
    "ddp": Setup(ddp=True),
    "ddp-eager": Setup(ddp=True, mode=""),
    "ddp-view": Setup(ddp=True, bucket_view=True),
    "ddp-nobcast": Setup(ddp=True, no_broadcast=True),
    "ddp-tuned": Setup(ddp=True, bucket_view=True, no_broadcast=True),
    "graphs-b384": Setup(mode="reduce-overhead", batch=384),
}


def one_variant(setup: Setup, batch: int, args: argparse.Namespace) -> dict:
    """Runs in its own process: build, warm up (compile), time the windows."""
    import torch

    from bench.shared.models import build_model

    cuda = args.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = cuda
    torch.manual_seed(0)
    model = build_model("resnet50").to(device, memory_format=torch.channels_last)
    if setup.ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29577")
        dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
        from bench.rank.engines import ddp_options
        from bench.spec import Workload, knobs

        options = ddp_options(
            {name: k.default for name, k in knobs(Workload)}  # what a variant does not set
            | {
                "gradient_as_bucket_view": setup.bucket_view,
                "broadcast_buffers": not setup.no_broadcast,
            }
        )
        model = DistributedDataParallel(model, device_ids=[0] if cuda else None, **options)
        torch._dynamo.config.optimize_ddp = False  # one graph, as the bench compiles DDP
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, fused=setup.fused or None
    )
    if setup.mode:
        model = torch.compile(model, mode=None if setup.mode == "default" else setup.mode)
    optimizer_step = torch.compile(optimizer.step) if setup.compile_optimizer else optimizer.step
    loss_fn = torch.nn.CrossEntropyLoss()
    size = args.image_size
    images = torch.randn(batch, 3, size, size, device=device).contiguous(
        memory_format=torch.channels_last
    )
    labels = torch.randint(0, 1000, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer_step()

    def seconds(steps: int) -> float:
        """Wall time of `steps` steps: CUDA events on a GPU (no synchronisation inside)."""
        if not cuda:
            started = time.perf_counter()
            for _ in range(steps):
                step()
            return time.perf_counter() - started
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(steps):
            step()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    first_step_s = seconds(1)  # compile, cuDNN autotuning, CUDA graph recording
    seconds(args.warmup)
    rates = [batch * args.steps / seconds(args.steps) for _ in range(args.windows)]
    peak = torch.cuda.max_memory_allocated(device) if cuda else 0
    return {"rates": rates, "first_step_s": first_step_s, "peak_gb": peak / 1e9, "batch": batch}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="base,fused,graphs,b384,ddp,ddp-tuned")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per window")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=25, help="untimed steps after the first")
    parser.add_argument("--limit", type=float, default=240, help="seconds per variant")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        setup = Setup(**json.loads(args.one))
        batch = setup.batch or args.batch_size
        got = one_variant(setup, batch, args)
        print(MARK + json.dumps(got), flush=True)
        return 0

    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    results: list[tuple[str, dict | str]] = []
    # the first again at the end: the drift between the two ends
    for name in [*names, names[0]] if len(names) > 1 else names:
        argv = [sys.executable, __file__, "--one", json.dumps(asdict(VARIANTS[name]))]
        argv += ["--batch-size", str(args.batch_size), "--steps", str(args.steps)]
        argv += ["--windows", str(args.windows), "--warmup", str(args.warmup)]
        argv += ["--image-size", str(args.image_size), "--device", args.device]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=args.limit)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
            outcome: dict | str = (
                json.loads(lines[-1][len(MARK) :])
                if lines
                else f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
            )
        except subprocess.TimeoutExpired:
            outcome = f"cut after {args.limit:.0f} s"
        results.append((name, outcome))
        rates = outcome["rates"] if isinstance(outcome, dict) else None
        print(f"{name}: {rates or outcome}", flush=True)

    base = results[0][1]
    base_median = statistics.median(base["rates"]) if isinstance(base, dict) else None
    print(f"\n{'variant':<20} {'batch':>5} {'best img/s':>10} {'median':>8} {'ratio':>6} "
          f"{'first step s':>12} {'peak GB':>7}")  # fmt: skip
    for name, outcome in results:
        if not isinstance(outcome, dict):
            print(f"{name:<20} {outcome}")
            continue
        median = statistics.median(outcome["rates"])
        ratio = f"{median / base_median:.3f}" if base_median else "-"
        best, first = max(outcome["rates"]), outcome["first_step_s"]
        print(f"{name:<20} {outcome['batch']:>5} {best:>10.1f} {median:>8.1f} {ratio:>6} "
              f"{first:>12.1f} {outcome['peak_gb']:>7.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

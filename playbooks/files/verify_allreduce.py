"""acceptance.yml's node-to-node all-reduce: one rank per GPU on two or more nodes, by torchrun.

    python -m torch.distributed.run --nnodes 2 --nproc-per-node G --node-rank R \\
        --master-addr A --master-port P verify_allreduce.py [--mib M] [--iters I] [--warmup W]
        [--repeats R]

Each rank all-reduces a float32 buffer of --mib MiB with torch.distributed: NCCL on GPUs (one GPU
per rank, by LOCAL_RANK), Gloo where torch sees none (how CI runs it on CPU). Every rank times
--repeats samples of --iters all-reduces each (after --warmup untimed); a sample's time is the
slowest rank's. Rank 0 prints ONE JSON object: the bandwidth of each sample as nccl-tests counts
it, algbw = bytes / seconds and busbw = algbw x 2(n-1)/n for n ranks (nccl-tests'
doc/PERFORMANCE.md, "AllReduce", read 2026-11-27), in GB/s (1e9 bytes/s). The other ranks print
nothing. Exit status 2 for a bad option, naming it, its value and what is
expected.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import time

GB = 1e9
MIB = 1 << 20


def positive(kind, least):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (isinstance(value, int) or math.isfinite(value)) or value < least:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not usable (expected a finite number >= {least})"
            )
        return value

    return parse


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verify_allreduce.py", description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=positive(float, 1 / MIB), default=64.0, help="buffer, MiB")
    parser.add_argument("--iters", type=positive(int, 1), default=5, help="all-reduces per sample")
    parser.add_argument("--warmup", type=positive(int, 0), default=2, help="untimed all-reduces")
    parser.add_argument("--repeats", type=positive(int, 2), default=5, help="samples")
    return parser.parse_args(argv)


def bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus factor: 2(n-1)/n."""
    return 2 * (ranks - 1) / ranks


def main(argv: list[str]) -> int:
    args = parse(argv)
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    count = max(1, int(args.mib * MIB) // 4)
    buffer = torch.ones(count, dtype=torch.float32, device=device)

    def settle() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        dist.all_reduce(buffer)
    settle()
    samples = []
    for _ in range(args.repeats):
        dist.barrier()
        began = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(buffer)
        settle()
        seconds = time.perf_counter() - began
        # The slowest rank decides when an all-reduce is done: take the longest time of any rank.
        longest = torch.tensor([seconds], dtype=torch.float64, device=device)
        dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        samples.append(count * 4 * args.iters / float(longest.item()) / GB)
    hosts = [None] * ranks
    dist.all_gather_object(hosts, socket.gethostname())
    dist.destroy_process_group()
    if rank == 0:
        factor = bus_factor(ranks)
        busbw = [algbw * factor for algbw in samples]
        print(
            json.dumps(
                {
                    "tool": "verify_allreduce",
                    "backend": "nccl" if cuda else "gloo",
                    "ranks": ranks,
                    "hosts": sorted(set(hosts)),
                    "bytes": count * 4,
                    "iters": args.iters,
                    "algbw_gbs": samples,
                    "busbw_gbs": busbw,
                    "busbw_median_gbs": statistics.median(busbw),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

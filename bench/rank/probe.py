"""Allreduce bandwidth probe, run under torchrun: `python -m bench.rank.probe --spec <ProbeSpec>`.

Each rank allreduces one fp32 buffer of about the size of ResNet-50's gradients (~100 MB),
a few times untimed and then `iterations` times, each timed between barriers. Rank 0 reports
the median time; the sweep turns it into algbw/busbw (nccl-tests' definitions) and, with the
measured compute time of a step, into the efficiency ceiling communication allows.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from bench.rank.engines import DdpEngine
from bench.rank.profiling import synchronize
from bench.shared import wire
from bench.shared.lifeline import exit_rank
from bench.spec import ProbeSpec

WARMUP = 3


def main(argv: list[str] | None = None) -> int:
    spec = ProbeSpec.from_argv(argv, __doc__)
    torch.set_num_threads(spec.threads_per_rank)
    engine = DdpEngine()
    info = engine.init(spec.device)
    buffer = torch.zeros(spec.nbytes // 4, dtype=torch.float32, device=info.device)

    def sync() -> None:
        synchronize(info.device)
        dist.barrier()

    times = []
    for i in range(WARMUP + spec.iterations):
        sync()
        start = time.perf_counter()
        dist.all_reduce(buffer)
        sync()
        if i >= WARMUP:
            times.append(time.perf_counter() - start)
    slowest = engine.gather(statistics.median(times))
    if info.rank == 0:
        wire.emit(
            spec.probe_id,
            {
                "backend": info.backend,
                "world_size": info.world_size,
                "time_s": max(slowest),
                "nbytes": buffer.numel() * 4,
            },
        )
    engine.shutdown()
    return 0


if __name__ == "__main__":
    exit_rank(main())

"""What a step's time goes to: NVTX ranges for Nsight Systems and the --profile trace.

`nvtx_range` marks warm-up, the timed window, each step and the loader-only window on the CUDA
timeline (no-ops on CPU), so an `nsys profile python -m bench.scaling ...` capture lines up with
the bench's own phases; `synchronize` ends every timed window (the worker's, the loader's, the
probe's, the profiled steps'). `profile_steps` runs a few extra steps after the timed window (so the
profiler's overhead never touches a measured figure) on every rank, recording them with
torch.profiler on the one rank that is asked to: it writes a Chrome/Perfetto trace and returns a
summary for the report (the ops or kernels that took the most time, and the share of time spent
in communication).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType

PROFILE_STEPS = 5  # recorded steps per profiled run, after one unrecorded step
TOP_OPS = 10
# Collective work as it appears in a trace: NCCL kernels and ops (ncclDevKernel_AllReduce_...,
# nccl:all_reduce), gloo's ops (gloo:all_reduce), torch.distributed's c10d ops and Horovod's.
COMMUNICATION = re.compile(r"nccl|gloo|c10d::|all_?reduce|allgather|broadcast|horovod", re.I)


def nvtx_range(name: str, device: torch.device) -> AbstractContextManager[None]:
    """An NVTX range on a CUDA device (shown by Nsight Systems); nothing on CPU."""
    return torch.cuda.nvtx.range(name) if device.type == "cuda" else nullcontext()


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on a CUDA device (nothing to wait for on CPU): a timed window
    ends only once the device has done what was asked in it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_communication(name: str) -> bool:
    return bool(COMMUNICATION.search(name))


def summarise_events(
    events: Any, device: torch.device, wall_s: float, steps: int
) -> dict[str, Any]:
    """The top ops (CPU) or kernels (GPU) by self time and the share in communication.

    On a GPU the shares are of the GPU's busy time (every kernel's own time: NCCL's kernels
    against the rest); on CPU of the profiled steps' wall time (collective ops against it)."""
    cuda = device.type == "cuda"

    def self_us(e: Any) -> float:
        if cuda:
            return float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        return float(e.self_cpu_time_total)

    def counted(e: Any) -> bool:
        # On a GPU only the device's own events: kernels, copies and sets. The CPU ops that
        # launched them carry the same time as their "self device time", and user annotations
        # (DistributedDataParallel.forward, NVTX-like record_function ranges) span it on the GPU
        # timeline: counting either would count every kernel two or three times.
        if not cuda:
            return True
        return e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)

    timed = [e for e in events if counted(e) and self_us(e) > 0]
    busy_us = sum(self_us(e) for e in timed) if cuda else wall_s * 1e6
    comm = [e for e in timed if is_communication(e.key)]
    comm_us = sum(self_us(e) for e in comm)
    top = sorted(timed, key=self_us, reverse=True)[:TOP_OPS]
    return {
        "steps": steps,
        "wall_s": wall_s,
        "basis": (
            "share of the GPU's kernel time"
            if cuda
            else "time in the ops (on any thread) / wall time of the profiled steps"
        ),
        # None: no collective op or kernel was recorded at all (not "no communication")
        "communication_share": comm_us / busy_us if busy_us > 0 and comm else None,
        "top": [
            {
                "name": e.key,
                "ms_per_step": self_us(e) / 1e3 / steps,
                "share": self_us(e) / busy_us if busy_us > 0 else None,
                "calls_per_step": e.count / steps,
                "communication": is_communication(e.key),
            }
            for e in top
        ],
    }


def profile_steps(
    train_step: Callable[[Any, Any], None],
    batches: Iterator[Any],
    device: torch.device,
    trace_path: str,
    steps: int = PROFILE_STEPS,
) -> dict[str, Any] | None:
    """Run 1 + `steps` training steps (every rank must, to keep collectives matched); with a
    `trace_path`, record the last `steps` with torch.profiler, write the Chrome trace there and
    return its summary (None on the ranks that only take part)."""
    train_step(*next(batches))  # the first step after the loader-only window: not recorded
    if not trace_path:
        for _ in range(steps):
            train_step(*next(batches))
        return None
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for i in range(steps):
            with nvtx_range(f"profiled step {i}", device):
                train_step(*next(batches))
        synchronize(device)
        wall = time.perf_counter() - start
    path = Path(trace_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return {"trace": str(path), **summarise_events(prof.key_averages(), device, wall, steps)}

"""--cpu-affinity on: each GPU rank runs on its own share of the cores next to its GPU.

On a two-socket server a rank's input pipeline and launch thread run faster on the cores of the
NUMA node its GPU hangs off. NVML names those cores (`nvmlDeviceGetCpuAffinity`: a bitmask, 64
CPUs per word on 64-bit machines; NVML API reference, "CPU and Memory Affinity", and
nvidia-ml-py 13.615.71's binding, which returns c_ulonglong words, both read 2026-11-27). As
DeepLearningExamples' "socket_unique_contiguous" mode does (NVIDIA/DeepLearningExamples,
PyTorch/Classification/ConvNets/image_classification/gpu_affinity.py, read 2026-11-27), the
local ranks whose GPUs share a node's cores split them into equal, disjoint, contiguous shares of
whole physical cores (hyperthread siblings together), equal across nodes too, so no rank gets
more CPU than another. Only cores the process may use (`os.sched_getaffinity`: cgroups, Slurm's
binding, taskset) are handed out.

The arithmetic is pure (`cores_of_mask`, `rank_cores`, ...); `pin_rank` asks NVML and sets the
affinity. Where it cannot (a CPU rank, no NVML, no allowed core near the GPU) the rank keeps its
affinity and says why, once, on stderr.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Sequence, Set

from bench.shared.telemetry import nvml_handle

WORD_BITS = 64  # CPUs per word of NVML's CPU-affinity bitmask (see above)


def mask_words(cpu_count: int, word_bits: int = WORD_BITS) -> int:
    """Words of a bitmask with a bit for each of `cpu_count` CPUs."""
    return max(1, -(-cpu_count // word_bits))


def cores_of_mask(words: Iterable[int], word_bits: int = WORD_BITS) -> frozenset[int]:
    """NVML's CPU bitmask as CPU numbers: bit b of word i is CPU i * word_bits + b."""
    return frozenset(
        i * word_bits + bit
        for i, word in enumerate(words)
        for bit in range(word_bits)
        if int(word) >> bit & 1
    )


def parse_cpu_list(text: str) -> list[int]:
    """Linux's CPU list format ("0-3,8", as in thread_siblings_list) as CPU numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers in Linux's CPU list format: {0, 1, 2, 3, 8} -> "0-3,8"."""
    # consecutive CPUs share their offset from their position in the sorted list
    runs = itertools.groupby(enumerate(sorted(cpus)), lambda pair: pair[1] - pair[0])
    ranges = [[cpu for _, cpu in run] for _, run in runs]
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges)


def physical_cores(cores: Iterable[int], physical: Callable[[int], int]) -> list[list[int]]:
    """`cores` grouped by physical core (hyperthread siblings together), in core order."""
    groups: dict[int, list[int]] = {}
    for cpu in sorted(cores):
        groups.setdefault(physical(cpu), []).append(cpu)
    return [groups[key] for key in sorted(groups)]


def rank_cores(
    process_cores: Sequence[Set[int]],
    local_rank: int,
    allowed: Set[int],
    physical: Callable[[int], int] = lambda cpu: cpu,
) -> frozenset[int]:
    """The cores of local process `local_rank`, given the cores next to each local process's
    GPU(s) (`process_cores`, by local rank) and the cores the processes may use: its GPU's
    allowed cores, split among the local processes whose GPUs have the same ones into equal
    contiguous shares of whole physical cores; each share as large as the smallest one any
    node allows (balanced ranks; cores beyond that stay unused). Empty when its GPU has no
    allowed core or there are more processes than physical cores."""
    usable = [frozenset(c) & frozenset(allowed) for c in process_cores]
    mine = usable[local_rank]
    if not mine:
        return frozenset()
    groups = {c: [i for i, other in enumerate(usable) if other == c] for c in usable if c}
    each = min(len(physical_cores(c, physical)) // len(peers) for c, peers in groups.items())
    index = groups[mine].index(local_rank)
    share = physical_cores(mine, physical)[index * each : (index + 1) * each]
    return frozenset(cpu for group in share for cpu in group)


@functools.cache
def sibling_key(cpu: int) -> int:
    """The lowest of a CPU's hyperthread siblings (sysfs topology): one number per physical
    core; the CPU itself where sysfs does not say."""
    path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    try:
        with open(path) as siblings:
            return min(parse_cpu_list(siblings.read()), default=cpu)
    except (OSError, ValueError):
        return cpu


def nvml_gpu_cores(cuda_devices: Iterable[int]) -> list[frozenset[int]]:
    """The cores NVML names next to each CUDA device (raises without NVML)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        words = mask_words(os.cpu_count() or 1)
        return [
            cores_of_mask(pynvml.nvmlDeviceGetCpuAffinity(nvml_handle(pynvml, d), words))
            for d in cuda_devices
        ]
    finally:
        pynvml.nvmlShutdown()


def set_affinity(cores: Set[int]) -> None:
    """Run this process on `cores`: the calling thread and the threads it starts from now on,
    and the threads already running (Horovod's background thread, NCCL's) as well."""
    os.sched_setaffinity(0, cores)
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(task), cores)


def _keep(why: str) -> None:
    cores = os.sched_getaffinity(0)
    print(
        f"bench: --cpu-affinity on: this rank keeps its CPU affinity "
        f"({len(cores)} cores: {format_cpu_list(cores)}): {why}",
        file=sys.stderr,
    )


def pin_rank(
    local_rank: int,
    local_size: int,
    devices: int,
    device_type: str,
    gpu_cores: Callable[[Iterable[int]], list[frozenset[int]]] = nvml_gpu_cores,
    physical: Callable[[int], int] = sibling_key,
) -> frozenset[int] | None:
    """Pin this rank to its share (see `rank_cores`) and return it; None when it keeps its
    affinity (said on stderr). The local processes are `local_size`, each driving `devices`
    GPUs (several under DataParallel: their cores together), CUDA devices in local-rank order."""
    if device_type != "cuda":
        _keep("the rank runs on CPU (no GPU to be near)")
        return None
    try:
        per_gpu = gpu_cores(range(local_size * devices))
    except Exception as exc:  # no NVML, no driver, a device NVML cannot find
        _keep(f"NVML did not answer ({type(exc).__name__}: {exc})")
        return None
    process_cores = [
        frozenset().union(*per_gpu[p * devices : (p + 1) * devices]) for p in range(local_size)
    ]
    allowed = frozenset(os.sched_getaffinity(0))
    cores = rank_cores(process_cores, local_rank, allowed, physical)
    if not cores:
        near = format_cpu_list(process_cores[local_rank])
        _keep(f"none of its GPU's cores ({near}) is allowed, or fewer than the local ranks")
        return None
    set_affinity(cores)
    print(  # not a "bench: " line: those are the key lines of a failed run's error
        f"cpu affinity: local rank {local_rank} pinned to {len(cores)} cores "
        f"({format_cpu_list(cores)})",
        file=sys.stderr,
    )
    return cores

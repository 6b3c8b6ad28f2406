"""verify.yml's hardware microbenchmarks: what each GPU computes and moves, measured with torch.

    python verify_hardware.py [--device cuda|cpu] [--gemm-size N] [--hbm-mib M] [--host-mib M]
                              [--p2p-mib M] [--repeats R] [--max-repeats R] [--confidence C]
                              [--floors JSON] [--iters I] [--warmup W]
                              [--tests gemm,hbm,host,p2p] [--cpu-devices K]
                              [--nvbandwidth PATH]

Run with the training environment's interpreter (as verify_torch.py); it imports torch, SciPy (a
dependency of the bench, so in that environment) and the standard library, so it runs where the
bench package itself is not installed. It prints ONE JSON object on standard output and its
progress on standard error:

- per GPU, dense matrix-product throughput (TFLOPS) in bf16, fp16, tf32 and fp32, the device-local
  copy bandwidth of its memory, and host-to-device / device-to-host copy bandwidth from pinned host
  memory with that GPU alone;
- the host copies again with every GPU at once (one thread and one stream per GPU, released
  together): the aggregate and each GPU's share, where a GPU behind a shared PCIe switch or on a
  far NUMA node shows up;
- with 2+ GPUs, the copy bandwidth of each ordered pair, and whether it went peer to peer.

Every figure is measured --repeats times, and each sample times --iters operations after --warmup
untimed ones (CUDA events on a GPU, perf_counter on the CPU). The JSON keeps every sample, the
best, the median, the mean and its Student-t interval at --confidence.

--floors takes the floors table (playbooks/vars/hardware_floors.yml's verify_hardware_floors, as
JSON). Each GPU is matched to its model's entry there, and each figure with a floor keeps being
sampled, up to --max-repeats samples, while its interval still contains the floor: the measurement
stops when it is clearly above or clearly below, or at the cap. Each figure then carries its floor
(value, kind, source) beside its interval, for verify.yml's judge (filter_plugins/gpurig_health.py:
pass, fail or inconclusive).

--device cpu runs the same code on CPU tensors with small default sizes: that is how CI exercises
the measuring code. There is no host-device link then: the "host" copies are host memcpy and the
JSON labels them so; --cpu-devices K stands K CPU "devices" in for K GPUs so that the all-at-once
threads and the pair loop run too.

--nvbandwidth PATH takes each GPU's host copies (h2d, d2h) from NVIDIA's nvbandwidth, as the
nvbandwidth role builds it, instead of torch's: each sample is one `nvbandwidth -j` run of its
host_to_device_memcpy_ce and device_to_host_memcpy_ce testcases (copy engine, one GPU at a time,
--host-mib buffers), repeated by the same rule, and each figure's "tool" says which measured it.

Exit status: 0 with the JSON; 2 for a bad option (before anything runs, naming the option, the
value and what is expected); 3 when --device cuda and torch sees no GPU (the JSON says so); 4 when
--nvbandwidth failed or printed no result (the JSON's "error" says why).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext

MIB = 1 << 20
TESTS = ("gemm", "hbm", "host", "p2p")
# Defaults per device. The CUDA GEMM size is a default, not a claim that it reaches the plateau of
# every GPU: --gemm-size changes it. The CPU sizes keep CI's run to seconds.
DEFAULTS = {
    "cuda": {"gemm_size": 8192, "hbm_mib": 1024.0, "host_mib": 256.0, "p2p_mib": 256.0},
    "cpu": {"gemm_size": 256, "hbm_mib": 16.0, "host_mib": 16.0, "p2p_mib": 16.0},
}
# TF32 tensor cores arrived with the Ampere architecture (PyTorch's CUDA semantics notes,
# pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-devices; TensorFlow's
# enable_tensor_float_32_execution page: "TensorFloat-32, or TF32 for short, is a math mode for
# NVIDIA Ampere GPUs"), and Ampere is compute capability major 8 (CUDA C++ Programming Guide,
# docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#compute-capability: "The major revision
# number is 9 for devices based on the NVIDIA Hopper GPU architecture, 8 for devices based on the
# NVIDIA Ampere GPU architecture"; all checked 2026-11-27). Below it allow_tf32 changes nothing,
# so the tf32 row is skipped rather than reported as a second fp32 row.
TF32_MIN_CAPABILITY = (8, 0)
# Bandwidth in GB/s is 1e9 bytes per second, as nvbandwidth (memcpy.cpp: bytes * loopCount * 1e6
# / microseconds, printed * 1e-9) and CUDA samples' bandwidthTest ("/ (double)1e9") count it
# (NVIDIA/nvbandwidth v0.8 and NVIDIA/cuda-samples Samples/1_Utilities/bandwidthTest, 2026-11-27).
GB = 1e9


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- The command line: every value is checked before torch is imported -------------------------
def whole_number(least: int) -> Callable[[str], int]:
    """argparse type: a whole number >= least, refused with the value and what is expected."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not usable (expected a whole number >= {least})"
            )
        return value

    return parse


positive_int, non_negative_int = whole_number(1), whole_number(0)


def positive_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number (expected a size in MiB, finite and > 0)"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a usable size (expected a size in MiB, finite and > 0)"
        )
    if int(value * MIB) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is under one byte (expected a size in MiB of at least 1 byte)"
        )
    return value


def confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not usable (expected a confidence level from 0.5 up to, not including, 1)"
        )
    return value


def floors_table(text: str) -> list[dict]:
    """The floors table: [{model, tokens: [str], floors: {figure: {value, kind, source}}}]; a
    figure measured at several sizes (allreduce_busbw_gbs, judged in verify.yml) lists them."""
    try:
        table = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"is not JSON ({error})") from None
    shaped = isinstance(table, list) and all(
        isinstance(entry, dict)
        and isinstance(entry.get("tokens"), list)
        and isinstance(entry.get("floors"), dict)
        and all(
            isinstance(floor, dict) and isinstance(floor.get("value"), int | float)
            for floors in entry["floors"].values()
            for floor in (floors if isinstance(floors, list) else [floors])
        )
        for entry in table
    )
    if not shaped:
        raise argparse.ArgumentTypeError(
            "is not a floors table (expected a JSON list of {model, tokens: [...], floors: "
            "{figure: {value: number, kind, source}}}, as playbooks/vars/hardware_floors.yml)"
        )
    return table


def test_list(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in TESTS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no known test (expected a comma-separated subset of {','.join(TESTS)})"
        )
    return names


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="verify_hardware.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--gemm-size", type=positive_int, help="n of the n x n x n products (cuda 8192, cpu 256)"
    )
    parser.add_argument(
        "--hbm-mib", type=positive_mib, help="device-local copy buffer, MiB (cuda 1024, cpu 16)"
    )
    parser.add_argument(
        "--host-mib", type=positive_mib, help="pinned host <-> GPU buffer, MiB (cuda 256, cpu 16)"
    )
    parser.add_argument(
        "--p2p-mib", type=positive_mib, help="GPU -> GPU buffer, MiB (cuda 256, cpu 16)"
    )
    parser.add_argument(
        "--repeats", type=whole_number(2), default=5, help="samples per figure (2 or more)"
    )
    parser.add_argument(
        "--max-repeats",
        type=positive_int,
        default=30,
        help="samples per figure at most, while its interval still contains its floor",
    )
    parser.add_argument(
        "--confidence", type=confidence, default=0.95, help="of each Student-t interval"
    )
    parser.add_argument(
        "--floors", type=floors_table, default=[], help="the floors table as JSON (a list)"
    )
    parser.add_argument("--iters", type=positive_int, default=10, help="operations per sample")
    parser.add_argument(
        "--warmup", type=non_negative_int, default=3, help="untimed operations before the samples"
    )
    parser.add_argument(
        "--tests", type=test_list, default=TESTS, help="subset of gemm,hbm,host,p2p"
    )
    parser.add_argument(
        "--cpu-devices", type=positive_int, default=1, help="CPU stand-ins for GPUs (--device cpu)"
    )
    parser.add_argument("--nvbandwidth", help="nvbandwidth binary for the host copies")
    args = parser.parse_args(argv)
    if args.nvbandwidth is not None and not os.access(args.nvbandwidth, os.X_OK):
        parser.error(
            f"argument --nvbandwidth: {args.nvbandwidth!r} is not an executable file"
            " (expected the nvbandwidth binary, as the nvbandwidth role installs it)"
        )
    if args.cpu_devices != 1 and args.device != "cpu":
        parser.error(f"argument --cpu-devices: {args.cpu_devices} applies to --device cpu only")
    if args.max_repeats < args.repeats:
        parser.error(
            f"argument --max-repeats: {args.max_repeats} is below --repeats {args.repeats}"
            " (expected a cap at least as large)"
        )
    for key, value in DEFAULTS[args.device].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


# ---- Arithmetic the figures are made of ---------------------------------------------------------
def gemm_flops(n: int) -> int:
    """Floating-point operations of one n x n by n x n product: n^2 outputs, n multiply-adds
    each."""
    return 2 * n**3


def tflops(n: int, products: int, seconds: float) -> float:
    return gemm_flops(n) * products / seconds / 1e12


def gbs(bytes_moved: float, seconds: float) -> float:
    return bytes_moved / seconds / GB


def summary(samples: list[float], unit: str) -> dict:
    """Every sample and the best and median of them (higher is better for every figure here)."""
    return {
        "unit": unit,
        "samples": samples,
        "best": max(samples),
        "median": statistics.median(samples),
    }


def interval(samples: list[float], level: float) -> tuple[float, float]:
    """The Student-t interval of the mean of the samples: mean +- t * s / sqrt(n), as the bench
    puts on its launches (bench/stats.py). NaN for fewer than two samples."""
    if len(samples) < 2:
        return math.nan, math.nan
    from scipy import stats  # here: the option parser runs without SciPy

    centre = statistics.fmean(samples)
    half = float(stats.t.ppf((1 + level) / 2, len(samples) - 1)) * (
        statistics.stdev(samples) / math.sqrt(len(samples))
    )
    return centre - half, centre + half


def unclear(samples: list[float], floor: float | None, level: float) -> bool:
    """Whether the floor still lies within the samples' interval (or there is no interval yet)."""
    if floor is None:
        return False
    low, high = interval(samples, level)
    return not (low >= floor or high < floor)


# ---- The floors table: which entry a GPU is judged by -------------------------------------------
def words(name: str) -> set[str]:
    return set(re.findall(r"[A-Z0-9]+", name.upper()))


def floor_entry(name: str, table: list[dict]) -> dict | None:
    """The first entry of the floors table whose every token is a word of the GPU's name (the
    table lists the more specific models first)."""
    found = words(name)
    for entry in table:
        if all(token.upper() in found for token in entry.get("tokens", [])):
            return entry
    return None


def floor_of(entry: dict | None, key: str) -> dict | None:
    return (entry or {}).get("floors", {}).get(key)


def judged(figure: dict, floor: dict | None, level: float) -> dict:
    """A figure's summary with its mean, its interval and the floor it is judged by."""
    low, high = interval(figure["samples"], level)
    figure.update(
        mean=statistics.fmean(figure["samples"]),
        interval=[low, high],
        confidence=level,
        floor=floor,
    )
    return figure


def attach_floors(report: dict, table: list[dict], level: float) -> dict:
    """Each GPU's model (its floors-table entry) and each figure's interval and floor, in place.
    Every figure keys the table by the name verify.yml's judge reports it under."""
    names = {}
    for gpu in report.get("gpus", []):
        entry = floor_entry(str(gpu.get("name", "")), table)
        gpu["model"] = None if entry is None else entry.get("model")
        names[gpu.get("index")] = entry
        for precision, figure in gpu.get("gemm_tflops", {}).items():
            judged(figure, floor_of(entry, f"gemm_{precision}_tflops"), level)
        for key in ("hbm_copy_gbs", "h2d_gbs", "d2h_gbs"):
            if key in gpu:
                judged(gpu[key], floor_of(entry, key), level)
    for pair in report.get("p2p_gbs", []):
        judged(pair, floor_of(names.get(pair.get("src")), "p2p_gbs"), level)
    return report


# ---- Timing -------------------------------------------------------------------------------------
class Clock:
    """Times `iters` calls of an operation queued on one device; returns seconds."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def time(self, operation, iters: int) -> float:
        if not self.cuda:
            start = time.perf_counter()
            for _ in range(iters):
                operation()
            return time.perf_counter() - start
        torch = self.torch
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream(self.device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(iters):
                operation()
            end.record(stream)
            end.synchronize()
            return start.elapsed_time(end) / 1e3  # elapsed_time is in milliseconds

    def samples(
        self, operation, args: argparse.Namespace, rate, floor: dict | None = None
    ) -> list[float]:
        """Warm up, then --repeats samples of --iters operations each, as rate(seconds); then
        more, up to --max-repeats, while the floor (when there is one) is inside their interval."""
        for _ in range(args.warmup):
            operation()
        self.sync()
        taken = [rate(self.time(operation, args.iters)) for _ in range(args.repeats)]
        value = None if floor is None else float(floor["value"])
        while len(taken) < args.max_repeats and unclear(taken, value, args.confidence):
            taken.append(rate(self.time(operation, args.iters)))
        return taken


# ---- The measurements ---------------------------------------------------------------------------
def precisions(torch, device) -> tuple[dict, dict]:
    """{precision: (dtype, allow_tf32)} to measure on this device, and {precision: why skipped}."""
    run = {
        "bf16": (torch.bfloat16, False),
        "fp16": (torch.float16, False),
        "tf32": (torch.float32, True),
        "fp32": (torch.float32, False),
    }
    skipped = {}
    if device.type != "cuda":
        skipped["tf32"] = "TF32 is a CUDA tensor-core mode; the CPU has none"
    else:
        capability = torch.cuda.get_device_capability(device)
        if capability < TF32_MIN_CAPABILITY:
            skipped["tf32"] = f"compute capability {capability[0]}.{capability[1]} < 8.0"
        try:
            native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch before the including_emulation argument
            native_bf16 = capability >= (8, 0)
        if not native_bf16:
            skipped["bf16"] = "torch reports no native bf16 on this GPU"
    return {k: v for k, v in run.items() if k not in skipped}, skipped


def measure_gemm(torch, device, args: argparse.Namespace, entry=None) -> tuple[dict, dict]:
    n = args.gemm_size
    clock = Clock(torch, device)
    run, skipped = precisions(torch, device)
    figures = {}
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, (dtype, allow_tf32) in run.items():
            log(f"{device}: gemm {name} n={n}")
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
            # Random operands, like a training step's.
            a = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
            b = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
            samples = clock.samples(
                lambda a=a, b=b, c=c: torch.matmul(a, b, out=c),
                args,
                lambda seconds: tflops(n, args.iters, seconds),
                floor_of(entry, f"gemm_{name}_tflops"),
            )
            figures[name] = summary(samples, "TFLOPS")
            del a, b, c
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return figures, skipped


def measure_hbm(torch, device, args: argparse.Namespace, entry=None) -> dict:
    nbytes = int(args.hbm_mib * MIB)
    log(f"{device}: device-local copy of {nbytes} bytes")
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    # A copy of B bytes reads B and writes B. Conventions differ: CUDA samples' bandwidthTest
    # counts both for device to device ("2.0f * memSize * MEMCOPY_ITERATIONS"), nvbandwidth's
    # device_local_copy counts the bytes copied once (memcpy.cpp, copy size * loopCount), and
    # DCGM's memory_bandwidth test times a STREAM triad and reports "the rate at which data can be
    # read from and written to GPU memory" (NVIDIA/cuda-samples bandwidthTest.cu, NVIDIA/nvbandwidth
    # v0.8, docs.nvidia.com/datacenter/dcgm/latest/user-guide/diag-memory-bandwidth.html; all
    # 2026-11-27). This figure counts read+write, as bandwidthTest does, and says so in "counts":
    # nvbandwidth's device_local_copy would show half of it.
    samples = Clock(torch, device).samples(
        lambda: dst.copy_(src),
        args,
        lambda seconds: gbs(2 * nbytes * args.iters, seconds),
        floor_of(entry, "hbm_copy_gbs"),
    )
    return {
        "counts": "read+write (2 x bytes copied, per second)",
        "bytes_per_copy": nbytes,
        **summary(samples, "GB/s"),
    }


def host_buffers(torch, device, nbytes: int):
    """A host buffer (pinned where there is a GPU) and a device buffer of nbytes each."""
    pinned = device.type == "cuda"
    host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=pinned)
    return host, torch.empty(nbytes, dtype=torch.uint8, device=device)


def host_path(device, direction: str) -> str:
    if device.type != "cuda":
        return "host memcpy (--device cpu: no host-device link; not an h2d/d2h figure)"
    return "pinned host -> GPU" if direction == "h2d" else "GPU -> pinned host"


def copy_operation(host, on_device, direction: str):
    if direction == "h2d":
        return lambda: on_device.copy_(host, non_blocking=True)
    return lambda: host.copy_(on_device, non_blocking=True)


def measure_host_alone(torch, device, args: argparse.Namespace, entry=None) -> dict:
    nbytes = int(args.host_mib * MIB)
    host, on_device = host_buffers(torch, device, nbytes)
    clock = Clock(torch, device)
    figures = {}
    for direction in ("h2d", "d2h"):
        log(f"{device}: {direction} alone, {nbytes} bytes")
        samples = clock.samples(
            copy_operation(host, on_device, direction),
            args,
            lambda seconds: gbs(nbytes * args.iters, seconds),
            floor_of(entry, f"{direction}_gbs"),
        )
        figures[f"{direction}_gbs"] = {
            "path": host_path(device, direction),
            "tool": "torch (Tensor.copy_, timed with CUDA events)",
            "counts": "bytes copied per second (one direction)",
            "bytes_per_copy": nbytes,
            **summary(samples, "GB/s"),
        }
    return figures


# nvbandwidth's host testcases: a 1 x GPUs matrix each, "memcpy CE CPU(row) -> GPU(column)" and
# "CPU(row) <- GPU(column)" in GB/s, printed by -j as strings under
# {"nvbandwidth": {"testcases": [{"name", "status", "bandwidth_matrix"}]}} (NVIDIA/nvbandwidth
# testcases_ce.cpp and json_output.cpp, read 2026-11-28).
NVBANDWIDTH_TESTCASES = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce"}


def nvbandwidth_run(path: str, nbytes: int) -> dict[str, list[float]]:
    """One nvbandwidth -j run of both host testcases: {direction: [GB/s of each GPU]}."""
    argv = [path, "-j", "--bufferSize", str(nbytes), "-t", *NVBANDWIDTH_TESTCASES.values()]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    try:
        cases = {c.get("name"): c for c in json.loads(done.stdout)["nvbandwidth"]["testcases"]}
    except (ValueError, KeyError, TypeError) as error:
        raise RuntimeError(
            f"nvbandwidth printed no result (rc {done.returncode}): {error}"
        ) from None
    figures = {}
    for direction, name in NVBANDWIDTH_TESTCASES.items():
        case = cases.get(name, {})
        if case.get("status") != "Passed":
            said = case.get("error", "")
            raise RuntimeError(
                f"nvbandwidth {name}: {case.get('status', 'not run')} {said}".strip()
            )
        (row,) = case["bandwidth_matrix"]
        figures[direction] = [float(value) for value in row]
    return figures


def measure_host_nvbandwidth(args: argparse.Namespace, count: int, entries: list) -> list[dict]:
    """Each GPU's h2d_gbs and d2h_gbs from --repeats nvbandwidth runs, and more, up to
    --max-repeats, while any GPU's interval still contains its floor."""
    nbytes, runs = int(args.host_mib * MIB), []

    def unsettled() -> bool:
        return any(
            unclear(
                [run[d][i] for run in runs],
                None
                if floor_of(entries[i], f"{d}_gbs") is None
                else float(floor_of(entries[i], f"{d}_gbs")["value"]),
                args.confidence,
            )
            for i in range(count)
            for d in NVBANDWIDTH_TESTCASES
        )

    while len(runs) < args.repeats or (len(runs) < args.max_repeats and unsettled()):
        log(f"nvbandwidth: host copies, run {len(runs) + 1}, {nbytes} bytes")
        run = nvbandwidth_run(args.nvbandwidth, nbytes)
        if any(len(values) != count for values in run.values()):
            raise RuntimeError(f"nvbandwidth measured {len(run['h2d'])} GPUs, torch sees {count}")
        runs.append(run)
    paths = {"h2d": "pinned host -> GPU", "d2h": "GPU -> pinned host"}
    return [
        {
            f"{d}_gbs": {
                "path": paths[d],
                "tool": f"nvbandwidth {NVBANDWIDTH_TESTCASES[d]} (copy engine)",
                "counts": "bytes copied per second (one direction)",
                "bytes_per_copy": nbytes,
                **summary([run[d][i] for run in runs], "GB/s"),
            }
            for d in NVBANDWIDTH_TESTCASES
        }
        for i in range(count)
    ]


def all_at_once(torch, devices: list, operations: list, args: argparse.Namespace):
    """One sample with every device at once: one thread and one stream per device, released
    together by a barrier. Returns the wall seconds from the first release to the last finish and
    each device's own seconds (its clock)."""
    barrier = threading.Barrier(len(devices))
    starts, ends, seconds = ([0.0] * len(devices) for _ in range(3))
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            device, operation = devices[k], operations[k]
            clock = Clock(torch, device)
            stream = torch.cuda.Stream(device) if device.type == "cuda" else None
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                for _ in range(args.warmup):
                    operation()
                clock.sync()
                barrier.wait()
                starts[k] = time.perf_counter()
                seconds[k] = clock.time(operation, args.iters)
                ends[k] = time.perf_counter()
        except BaseException as error:  # re-raised in the main thread below
            barrier.abort()
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(devices))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        # The first real failure, not the broken barrier it left the other threads at.
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    return max(ends) - min(starts), seconds


def measure_host_all(torch, devices: list, args: argparse.Namespace) -> dict:
    """Each direction with every device copying at once; per device by its own clock, the
    aggregate by wall time."""
    nbytes = int(args.host_mib * MIB)
    buffers = [host_buffers(torch, device, nbytes) for device in devices]
    figures = {}
    for direction in ("h2d", "d2h"):
        log(f"all {len(devices)} devices at once: {direction}, {nbytes} bytes each")
        operations = [copy_operation(host, on_device, direction) for host, on_device in buffers]
        aggregate, per_device = [], [[] for _ in devices]
        for _ in range(args.repeats):
            wall, seconds = all_at_once(torch, devices, operations, args)
            aggregate.append(gbs(nbytes * args.iters * len(devices), wall))
            for k, own in enumerate(seconds):
                per_device[k].append(gbs(nbytes * args.iters, own))
        figures[direction] = {
            "path": host_path(devices[0], direction),
            "counts": "bytes copied per second (one direction)",
            "bytes_per_copy": nbytes,
            "devices": len(devices),
            "aggregate_gbs": summary(aggregate, "GB/s"),
            "per_device_gbs": [
                {"index": k, **summary(samples, "GB/s")} for k, samples in enumerate(per_device)
            ],
        }
    return figures


def measure_pairs(torch, devices: list, args: argparse.Namespace, entries=()) -> list[dict]:
    nbytes = int(args.p2p_mib * MIB)
    pairs = []
    for i, src_device in enumerate(devices):
        src = torch.ones(nbytes, dtype=torch.uint8, device=src_device)
        for j, dst_device in enumerate(devices):
            if i == j:
                continue
            if src_device.type == "cuda":
                peer = bool(torch.cuda.can_device_access_peer(i, j))
                # torch enables peer access where CUDA allows it and copies a contiguous buffer
                # with cudaMemcpyAsync either way ("Contiguous same-dtype copies can always use
                # cudaMemcpyAsync", pytorch aten/src/ATen/native/cuda/Copy.cu,
                # copy_requires_temporaries / maybe_enable_p2p_access, checked 2026-11-27).
                # Without peer access the copy is staged through host memory ("Transferring data
                # from one GPU to another will often require a 'staging' through host memory. The
                # exception to this is when ... P2P has been explicitly enabled", a Stack Overflow
                # answer copied at blog.csdn.net/weixin_42097208/article/details/112901164,
                # checked 2026-11-27).
                path = "peer" if peer else "staged through host memory (no peer access)"
            else:
                peer, path = False, "host memcpy (--device cpu: no GPU pair)"
            log(f"{src_device} -> {dst_device}: {path}, {nbytes} bytes")
            dst = torch.empty(nbytes, dtype=torch.uint8, device=dst_device)
            # "We always perform the copy on the source device, using the current stream on the
            # source device" (Copy.cu, copy_device_to_device, as above), so the source's clock
            # brackets it.
            samples = Clock(torch, src_device).samples(
                lambda src=src, dst=dst: dst.copy_(src, non_blocking=True),
                args,
                lambda seconds: gbs(nbytes * args.iters, seconds),
                floor_of(entries[i] if i < len(entries) else None, "p2p_gbs"),
            )
            pairs.append(
                {
                    "src": i,
                    "dst": j,
                    "peer": peer,
                    "path": path,
                    "counts": "bytes copied per second (one direction)",
                    "bytes_per_copy": nbytes,
                    **summary(samples, "GB/s"),
                }
            )
            del dst
        del src
    return pairs


def describe(torch, device, index: int) -> dict:
    if device.type != "cuda":
        return {"index": index, "name": platform.processor() or platform.machine(), "type": "cpu"}
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        # nvidia-smi -L and NVML name a GPU "GPU-<uuid>"; torch's str() leaves the prefix off
        # (torch 2.11 on an H200, seen 2026-11-27), so the figures join nvidia-smi's rows.
        uuid = str(uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    return {
        "index": index,
        "name": props.name,
        "type": "cuda",
        "uuid": uuid,
        "compute_capability": f"{props.major}.{props.minor}",
        "memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
    }


def run(args: argparse.Namespace) -> tuple[int, dict]:
    import torch

    began = time.perf_counter()
    report = {
        "tool": "verify_hardware",
        "device": args.device,
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "settings": {
            "tests": list(args.tests),
            "gemm_size": args.gemm_size,
            "hbm_bytes": int(args.hbm_mib * MIB),
            "host_bytes": int(args.host_mib * MIB),
            "p2p_bytes": int(args.p2p_mib * MIB),
            "repeats": args.repeats,
            "max_repeats": args.max_repeats,
            "confidence": args.confidence,
            "iters": args.iters,
            "warmup": args.warmup,
        },
        "units": {
            "TFLOPS": "2*n^3 flop per n x n x n product, times iters, / seconds / 1e12",
            "GB/s": "1e9 bytes per second; each figure's 'counts' says which bytes",
        },
    }
    if args.device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            report["error"] = "--device cuda, but torch sees no GPU"
            return 3, report
        devices = [torch.device("cuda", i) for i in range(count)]
    else:
        devices = [torch.device("cpu")] * args.cpu_devices

    gpus, entries = [], []
    for index, device in enumerate(devices):
        gpu = describe(torch, device, index)
        entry = floor_entry(gpu["name"], args.floors)
        entries.append(entry)
        if "gemm" in args.tests:
            gpu["gemm_tflops"], gpu["gemm_skipped"] = measure_gemm(torch, device, args, entry)
        if "hbm" in args.tests:
            gpu["hbm_copy_gbs"] = measure_hbm(torch, device, args, entry)
        if "host" in args.tests and not args.nvbandwidth:
            gpu.update(measure_host_alone(torch, device, args, entry))
        gpus.append(gpu)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    report["gpus"] = gpus
    if "host" in args.tests and args.nvbandwidth:
        for gpu, figures in zip(
            gpus, measure_host_nvbandwidth(args, len(gpus), entries), strict=True
        ):
            gpu.update(figures)
    if "host" in args.tests:
        report["host_all_at_once"] = measure_host_all(torch, devices, args)
    if "p2p" in args.tests:
        if len(devices) > 1:
            report["p2p_gbs"] = measure_pairs(torch, devices, args, entries)
        else:
            report["p2p_gbs"], report["p2p_skipped"] = [], "one device: no pair"
    attach_floors(report, args.floors, args.confidence)
    report["seconds"] = time.perf_counter() - began
    return 0, report


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        status, report = run(args)
    except RuntimeError as error:  # nvbandwidth failed or printed no result
        status, report = 4, {"tool": "verify_hardware", "error": str(error)}
        log(str(error))
    print(json.dumps(report))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""verify.yml's burn-in: every GPU held at matrix products and all-reduces, watched as it runs.

    python verify_burnin.py SECONDS [--window S] [--sample S] [--gemm-size N]
                                    [--allreduce-mib M | --no-allreduce]
                                    [--device cuda|cpu] [--cpu-devices K]

Run with the training environment's interpreter (as verify_hardware.py): it imports torch,
nvidia-ml-py (pynvml) and the standard library. Every GPU runs bf16 n x n products (fp32 on the
CPU), one thread and one stream each, for SECONDS. Each GPU's throughput is timed in windows of
--window seconds (CUDA events), so a GPU that slows as it heats shows as a falling series. With two
GPUs or more, one more thread all-reduces a --allreduce-mib MiB float32 buffer across all of them
for the same SECONDS, beside the products, with NCCL from this one process (torch.cuda.nccl's
all_reduce, one buffer and one stream per GPU), timed in windows as nccl-tests counts bus
bandwidth (busbw = bytes / seconds x 2(n-1)/n, GB/s): the links and the NVLink switches are loaded
and heated while the GPUs compute, as in training, and a link that degrades shows as a falling
series. Every
--sample seconds NVML is read for each GPU: SM clock, power, temperature and the clock event
(throttle) reasons, named as `nvidia-smi -q -d PERFORMANCE` names them. Xid errors are caught as
NVML critical-Xid events while the load runs, and each GPU's volatile uncorrectable ECC count is
read before and after. It prints ONE JSON object on standard output (progress on standard error);
the judge is filter_plugins/gpurig_health.py's burn_in (errors, fault reasons, throughput drift).

--device cpu runs the same load and windows on CPU tensors (K CPU "devices" with --cpu-devices)
without NVML: that is how CI exercises the measuring code. There, with K >= 2, the "all-reduce" is a
sum of the K buffers written back to each (no interconnect: the JSON labels it so).

Exit status: 0 with the JSON; 2 for a bad option (naming it, its value and what is expected); 3
when --device cuda and torch sees no GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import threading
import time

# NVML's clock event reason bits (nvmlClocksEventReason* in nvidia-ml-py's pynvml.py, 13.615.71,
# read 2026-11-27), named as nvidia-smi -q -d PERFORMANCE names them, the names verify.yml's
# verify_throttle_fault_reasons lists (tests/fixtures/health: nvidia-smi's real output).
REASONS = {
    0x1: "Idle",
    0x2: "Applications Clocks Setting",
    0x4: "SW Power Cap",
    0x8: "HW Slowdown",
    0x10: "Sync Boost",
    0x20: "SW Thermal Slowdown",
    0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown",
    0x100: "Display Clock Setting",
}
DEFAULT_GEMM = {"cuda": 8192, "cpu": 128}
# The all-reduce buffer: 256 MiB, the size acceptance.yml's node-to-node pairs all-reduce
# (acceptance_pair_mib). It is a load to hold and watch for a drift, not a figure judged against a
# floor; the CPU stand-in stays small.
DEFAULT_ALLREDUCE_MIB = {"cuda": 256.0, "cpu": 4.0}
MIB = 1 << 20


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def positive(kind, what: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (isinstance(value, int) or math.isfinite(value)) or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not usable (expected {what})")
        return value

    return parse


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="verify_burnin.py", description=__doc__.split("\n")[0])
    parser.add_argument("seconds", type=positive(float, "seconds, finite and > 0"))
    parser.add_argument(
        "--window", type=positive(float, "seconds, finite and > 0"), default=5.0,
        help="seconds per timed throughput window",
    )  # fmt: skip
    parser.add_argument(
        "--sample", type=positive(float, "seconds, finite and > 0"), default=1.0,
        help="seconds between NVML readings",
    )  # fmt: skip
    parser.add_argument("--gemm-size", type=positive(int, "a whole number >= 1"))
    parser.add_argument(
        "--allreduce-mib", type=positive(float, "MiB, finite and > 0"),
        help="the all-reduce buffer held beside the products with 2+ devices",
    )  # fmt: skip
    parser.add_argument("--no-allreduce", action="store_true", help="products only")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--cpu-devices", type=positive(int, "a whole number >= 1"), default=1)
    args = parser.parse_args(argv)
    if args.window > args.seconds:
        parser.error(
            f"argument --window: {args.window} is longer than the burn-in ({args.seconds} s);"
            " expected a window no longer than SECONDS"
        )
    if args.cpu_devices != 1 and args.device != "cpu":
        parser.error(f"argument --cpu-devices: {args.cpu_devices} applies to --device cpu only")
    if args.no_allreduce and args.allreduce_mib is not None:
        parser.error(f"argument --allreduce-mib: {args.allreduce_mib} given with --no-allreduce")
    args.gemm_size = args.gemm_size or DEFAULT_GEMM[args.device]
    args.allreduce_mib = args.allreduce_mib or DEFAULT_ALLREDUCE_MIB[args.device]
    return args


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASONS.items() if bits & bit]


# ---- The load: one thread per device, timed in windows ------------------------------------------
def load(torch, device, args, deadline: float, out: dict, errors: list) -> None:
    """Products until the deadline; out["windows"] gets each window's TFLOPS."""
    try:
        n, cuda = args.gemm_size, device.type == "cuda"
        dtype = torch.bfloat16 if cuda else torch.float32
        a = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
        b = torch.randn(n, n, device=device, dtype=torch.float32).to(dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        flop = 2 * n**3
        stream = torch.cuda.Stream(device) if cuda else None
        per_window = 1
        while time.monotonic() < deadline:
            if cuda:
                with torch.cuda.stream(stream):
                    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                    start.record(stream)
                    for _ in range(per_window):
                        torch.matmul(a, b, out=c)
                    end.record(stream)
                    end.synchronize()
                    seconds = start.elapsed_time(end) / 1e3
            else:
                began = time.perf_counter()
                for _ in range(per_window):
                    torch.matmul(a, b, out=c)
                seconds = time.perf_counter() - began
            if seconds >= args.window / 2:
                out["windows"].append(flop * per_window / seconds / 1e12)
            # Size the next window from this one: about --window seconds of products.
            per_window = max(1, round(per_window * args.window / max(seconds, 1e-6)))
    except BaseException as error:  # reported by the main thread
        errors.append(f"{device}: {type(error).__name__}: {error}")


def allreduce_load(torch, devices, args, deadline: float, out: dict, errors: list) -> None:
    """All-reduces across every device until the deadline; out["windows"] gets each window's bus
    bandwidth, GB/s. Zeros, so that the sums stay finite however many rounds run."""
    try:
        n, cuda = len(devices), devices[0].type == "cuda"
        numel = max(1, int(args.allreduce_mib * MIB) // 4)
        buffers = [torch.zeros(numel, device=d, dtype=torch.float32) for d in devices]
        if cuda:
            import torch.cuda.nccl as nccl

            streams = [torch.cuda.Stream(d) for d in devices]

            def once():
                nccl.all_reduce(buffers, streams=streams)

            def wait():
                for stream in streams:
                    stream.synchronize()
        else:

            def once():
                total = torch.stack(buffers).sum(0)
                for buffer in buffers:
                    buffer.copy_(total)

            def wait():
                pass

        per_window, bus = 1, 2 * (n - 1) / n
        while time.monotonic() < deadline:
            began = time.perf_counter()
            for _ in range(per_window):
                once()
            wait()
            seconds = time.perf_counter() - began
            if seconds >= args.window / 2:
                out["windows"].append(numel * 4 * per_window / seconds / 1e9 * bus)
            per_window = max(1, round(per_window * args.window / max(seconds, 1e-6)))
    except BaseException as error:  # reported by the main thread
        errors.append(f"all-reduce: {type(error).__name__}: {error}")


# ---- The watch: NVML readings, Xid events, ECC before and after ---------------------------------
class Watch:
    def __init__(self, count: int):
        import pynvml  # here: --device cpu runs without NVML

        self.nvml = pynvml
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.events, self.xid_note = None, None
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, self.events
                )
        except pynvml.NVMLError as error:
            self.events, self.xid_note = None, f"NVML Xid events not available: {error}"

    def ecc(self) -> list[int | None]:
        counts = []
        for handle in self.handles:
            try:
                counts.append(
                    int(
                        self.nvml.nvmlDeviceGetTotalEccErrors(
                            handle,
                            self.nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                            self.nvml.NVML_VOLATILE_ECC,
                        )
                    )
                )
            except self.nvml.NVMLError:
                counts.append(None)  # ECC off or not supported: recorded as unknown
        return counts

    def read(self, handle) -> dict:
        nvml = self.nvml
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        bits = int(reasons(handle))
        return {
            "sm_mhz": int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temp_c": int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "reasons": reason_names(bits),
        }

    def wait(self, seconds: float, xids: list, began: float) -> None:
        """Sleep `seconds`, catching Xid events meanwhile when NVML delivers them."""
        if self.events is None:
            time.sleep(seconds)
            return
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.events, max(1, int(left * 1000)))
            except self.nvml.NVMLError as error:
                if getattr(error, "value", None) == self.nvml.NVML_ERROR_TIMEOUT:
                    return
                raise
            index = int(self.nvml.nvmlDeviceGetIndex(event.device))
            xids.append({"t": time.monotonic() - began, "gpu": index, "xid": int(event.eventData)})


def describe(torch, device, index: int) -> dict:
    if device.type != "cuda":
        return {"index": index, "name": platform.processor() or platform.machine()}
    props = torch.cuda.get_device_properties(device)
    return {"index": index, "name": props.name}


def run(args: argparse.Namespace) -> tuple[int, dict]:
    import torch

    report = {
        "tool": "verify_burnin",
        "device": args.device,
        "host": platform.node(),
        "torch": torch.__version__,
        "settings": {
            "seconds": args.seconds,
            "window_seconds": args.window,
            "sample_seconds": args.sample,
            "gemm_size": args.gemm_size,
            "dtype": "bf16" if args.device == "cuda" else "fp32",
            "allreduce_mib": None if args.no_allreduce else args.allreduce_mib,
        },
    }
    if args.device == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            report["error"] = "--device cuda, but torch sees no GPU"
            return 3, report
        devices = [torch.device("cuda", i) for i in range(count)]
        watch = Watch(count)
    else:
        devices, watch = [torch.device("cpu")] * args.cpu_devices, None
    gpus = [{**describe(torch, d, i), "windows": [], "samples": []} for i, d in enumerate(devices)]
    xids: list[dict] = []
    ecc_before = watch.ecc() if watch else [None] * len(devices)
    errors: list[str] = []
    began = time.monotonic()
    deadline = began + args.seconds
    threads = [
        threading.Thread(target=load, args=(torch, d, args, deadline, gpu, errors))
        for d, gpu in zip(devices, gpus, strict=True)
    ]
    allreduce = None
    if len(devices) >= 2 and not args.no_allreduce:
        method = (
            "NCCL all-reduce across the GPUs (torch.cuda.nccl, one process)"
            if args.device == "cuda"
            else "sum of the CPU buffers (no interconnect)"
        )
        allreduce = {"mib": args.allreduce_mib, "devices": len(devices), "method": method}
        allreduce["windows"] = []
        threads.append(
            threading.Thread(
                target=allreduce_load, args=(torch, devices, args, deadline, allreduce, errors)
            )
        )
    for thread in threads:
        thread.start()
    log(f"{len(devices)} device(s) under load for {args.seconds:g} s")
    while any(thread.is_alive() for thread in threads):
        if watch:
            for gpu, handle in zip(gpus, watch.handles, strict=True):
                gpu["samples"].append({"t": time.monotonic() - began, **watch.read(handle)})
            watch.wait(args.sample, xids, began)
        else:
            time.sleep(min(args.sample, 0.2))
    for thread in threads:
        thread.join()
    ecc_after = watch.ecc() if watch else [None] * len(devices)
    for k, gpu in enumerate(gpus):
        gpu["ecc_uncorrected"] = {"before": ecc_before[k], "after": ecc_after[k]}
        gpu["xid"] = [x for x in xids if x["gpu"] == k]
    report["gpus"] = gpus
    report["allreduce"] = allreduce
    report["xid_watch"] = (
        "not on the CPU" if watch is None else watch.xid_note or "NVML critical-Xid events"
    )
    report["errors"] = errors
    report["seconds_run"] = time.monotonic() - began
    return 0, report


def main(argv: list[str]) -> int:
    args = parse(argv)
    status, report = run(args)
    print(json.dumps(report))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

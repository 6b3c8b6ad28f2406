"""What the machine is, and what its GPUs did during each run.

- `detect_environment`: the facts validation needs (GPUs, cores, Horovod) without creating a
  CUDA context in the sweep process (that would hold memory on GPU 0 for the whole sweep).
- `collect_system_info`: everything that explains a result, saved once per sweep: GPU models,
  driver, memory, `nvidia-smi topo -m`, torch/CUDA/cuDNN/NCCL/Horovod versions, NCCL_* and
  related environment variables, host, CPU, git SHA.
- `GpuSampler`: a background thread that samples one GPU's SM clock, power, temperature and
  clock-event (throttle) reasons with pynvml during a run's timed window.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import __version__
from bench.config import Environment, HorovodStatus

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR")

# NVML clock-event ("throttle") reason bits, from nvml.h (nvmlClocksEventReason*).
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
# Reasons that mean the GPU ran below the clocks it could otherwise sustain.
SLOWDOWN_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
     "hw_power_brake_slowdown"}
)  # fmt: skip


def decode_throttle_reasons(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def cpu_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup cpusets, unlike os.cpu_count)."""
    return len(os.sched_getaffinity(0))


def _run_json(argv: Sequence[str], timeout_s: float) -> dict[str, Any] | str:
    """A child's last stdout line parsed as JSON, or the reason it failed."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"exit status {done.returncode}: {tail}"
    try:
        return dict(json.loads(lines[-1]))
    except ValueError:
        return f"unexpected output: {lines[-1][:200]}"


_HOROVOD_PROBE = """
import json, horovod, horovod.torch as hvd
print(json.dumps({"version": horovod.__version__, "nccl": bool(hvd.nccl_built()),
                  "gloo": bool(hvd.gloo_built())}))
"""


def horovod_status(python: str = sys.executable) -> HorovodStatus:
    """Whether horovodrun and horovod.torch work here, and whether Horovod has NCCL.

    Checked in a child process: a Horovod built against another torch can abort on import.
    """
    horovodrun = Path(python).with_name("horovodrun")
    if not horovodrun.exists() and shutil.which("horovodrun") is None:
        return HorovodStatus(False, reason=f"horovodrun not found (next to {python} or on PATH)")
    found = _run_json([python, "-c", _HOROVOD_PROBE], timeout_s=180)
    if isinstance(found, str):
        return HorovodStatus(False, reason=f"import horovod.torch failed: {found}")
    if not found["gloo"]:
        return HorovodStatus(False, found["version"], found["nccl"], "Horovod built without Gloo")
    return HorovodStatus(True, found["version"], found["nccl"])


_CUDA_PROBE = """
import json, torch
p = torch.cuda.get_device_properties(0)
print(json.dumps({"count": torch.cuda.device_count(), "name": p.name,
                  "major": p.major, "bf16": torch.cuda.is_bf16_supported()}))
"""


def detect_environment(python: str = sys.executable, check_horovod: bool = True) -> Environment:
    import torch

    cores = cpu_cores()
    horovod = (
        horovod_status(python)
        if check_horovod
        else HorovodStatus(False, reason="not checked: not in this sweep")
    )
    if not torch.cuda.is_available():
        return Environment("cpu", 0, "", False, False, cores, horovod)
    found = _run_json([python, "-c", _CUDA_PROBE], timeout_s=180)
    if isinstance(found, str):
        raise RuntimeError(f"CUDA is available but querying GPU 0 failed: {found}")
    return Environment(
        device="cuda",
        gpu_count=int(found["count"]),
        gpu_name=str(found["name"]),
        bf16_supported=bool(found["bf16"]),
        tf32_supported=int(found["major"]) >= 8,
        cores=cores,
        horovod=horovod,
    )


def relevant_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """NCCL_*, GLOO_*, HOROVOD_* and the few other variables that change distributed results."""
    return {
        k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    }


def git_revision(path: Path = REPO_ROOT) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": sha or "unknown", "dirty": bool(status) if status is not None else None}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return None


def gpu_inventory() -> dict[str, Any]:
    """Driver and every GPU NVML sees; {"error": ...} where there is no NVIDIA driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # pynvml raises its own NVMLError subclasses or ImportError
        return {"error": f"NVML unavailable: {exc}"}
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpu: dict[str, Any] = {
                "index": i,
                "name": _text(pynvml.nvmlDeviceGetName(h)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(h)),
                "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(h).busId),
                "memory_gb": round(memory.total / 1024**3, 1),
            }
            for key, query, args in (
                ("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, ()),
                ("max_sm_clock_mhz", pynvml.nvmlDeviceGetMaxClockInfo, (pynvml.NVML_CLOCK_SM,)),
                ("persistence_mode", pynvml.nvmlDeviceGetPersistenceMode, ()),
            ):
                try:
                    gpu[key] = query(h, *args)
                except pynvml.NVMLError:
                    gpu[key] = None
            if gpu["power_limit_w"] is not None:
                gpu["power_limit_w"] /= 1000  # NVML reports milliwatts
            gpus.append(gpu)
        return {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": pynvml.nvmlSystemGetCudaDriverVersion(),
            "gpus": gpus,
        }
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvidia_topology() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def software_versions() -> dict[str, Any]:
    import torch

    from bench import models

    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torchvision": models.torchvision_version(),
        "torchvision_compiled_ops": models.torchvision_has_compiled_ops(),
        "bench": __version__,
    }
    if torch.cuda.is_available():
        versions["cudnn"] = torch.backends.cudnn.version()
        versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    return versions


def collect_system_info(env: Environment) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": env.cores,
        "memory_gb": _memory_gb(),
        "device": env.device,
        "gpu_name": env.gpu_name,
        "gpu_count": env.gpu_count,
        "nvml": gpu_inventory() if env.device == "cuda" else {"error": "no CUDA GPU visible"},
        "topology": nvidia_topology() if env.device == "cuda" else None,
        "versions": software_versions(),
        "horovod": {
            "available": env.horovod.available,
            "version": env.horovod.version,
            "nccl_built": env.horovod.nccl_built,
            "reason": env.horovod.reason,
        },
        "environment": relevant_environment(),
        "git": git_revision(),
    }


@dataclass(frozen=True)
class Sample:
    sm_clock_mhz: float
    power_w: float
    temperature_c: float
    reasons_mask: int


def summarise_samples(samples: Iterable[Sample]) -> dict[str, Any]:
    """Mean/min clock, mean/max power, max temperature and every clock-event reason seen."""
    items = list(samples)
    if not items:
        return {}
    mask = 0
    for s in items:
        mask |= s.reasons_mask
    return {
        "samples": len(items),
        "sm_clock_mhz_mean": sum(s.sm_clock_mhz for s in items) / len(items),
        "sm_clock_mhz_min": min(s.sm_clock_mhz for s in items),
        "power_w_mean": sum(s.power_w for s in items) / len(items),
        "power_w_max": max(s.power_w for s in items),
        "temperature_c_max": max(s.temperature_c for s in items),
        "throttle_reasons": decode_throttle_reasons(mask),
    }


def merge_telemetry(per_rank: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Combine ranks' summaries: mean of means, min of minimums, max of maximums, all reasons."""
    ranks = [t for t in per_rank if t]
    if not ranks:
        return {}
    reasons = sorted({r for t in ranks for r in t["throttle_reasons"]})
    return {
        "sm_clock_mhz_mean": sum(t["sm_clock_mhz_mean"] for t in ranks) / len(ranks),
        "sm_clock_mhz_min": min(t["sm_clock_mhz_min"] for t in ranks),
        "power_w_mean": sum(t["power_w_mean"] for t in ranks) / len(ranks),
        "power_w_max": max(t["power_w_max"] for t in ranks),
        "temperature_c_max": max(t["temperature_c_max"] for t in ranks),
        "throttle_reasons": reasons,
    }


def _nvml_handle(pynvml: Any, cuda_device: int) -> Any:
    """NVML's handle for a CUDA device: by PCI bus id, else by UUID (both survive
    CUDA_VISIBLE_DEVICES renumbering, unlike NVML's own index)."""
    import torch

    props = torch.cuda.get_device_properties(cuda_device)
    if hasattr(props, "pci_domain_id"):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}")


class GpuSampler:
    """Samples one CUDA device with pynvml every `interval_s` in a daemon thread.

    NVML numbers GPUs by PCI order and ignores CUDA_VISIBLE_DEVICES, so the device is found by
    its PCI bus id. NVML calls release the GIL (ctypes), so sampling does not slow training. On a
    machine without NVML the sampler records nothing.
    """

    def __init__(self, cuda_device: int | None, interval_s: float = 0.5) -> None:
        self._device = cuda_device
        self._interval_s = interval_s
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> GpuSampler:
        if self._device is None:
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = _nvml_handle(pynvml, self._device)
        except Exception as exc:  # no NVML or no matching device: sample nothing, say so
            print(f"bench: GPU telemetry disabled: {exc}", file=sys.stderr)
            return self
        reasons = getattr(
            pynvml,
            "nvmlDeviceGetCurrentClocksEventReasons",
            getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
        )

        def sample() -> Sample:
            return Sample(
                sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                temperature_c=pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                reasons_mask=int(reasons(handle)) if reasons else 0,
            )

        def sample_forever() -> None:
            while not self._stop.is_set():
                with contextlib.suppress(pynvml.NVMLError):
                    self._samples.append(sample())
                self._stop.wait(self._interval_s)

        self._thread = threading.Thread(target=sample_forever, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        return summarise_samples(self._samples)

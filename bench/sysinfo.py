"""The sweep's record of the machine it ran on: `collect_system_info`, saved once per sweep in
sweep.json: GPU models, driver, memory, `nvidia-smi topo -m`, torch/CUDA/cuDNN/NCCL/Horovod
versions, NCCL_* and related environment variables, host, CPU, git SHA.

What the machine offers a sweep (GPUs, capability, cores, Horovod) is bench.machine's; the GPU
telemetry sampled during a run's timed window lives with the ranks (bench.rank.telemetry).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import __version__
from bench.config import Environment
from bench.launchers.sites import run_here
from bench.machine import torch_facts
from bench.paths import REPO_ROOT

ENV_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR")


def relevant_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """NCCL_*, GLOO_*, HOROVOD_* and the few other variables that change distributed results."""
    return {
        k: v for k, v in sorted(environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES
    }


def git_revision(path: Path = REPO_ROOT) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        done = run_here(["git", "-C", str(path), *args], 10)
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


def software_versions() -> dict[str, Any]:
    import torch

    from bench.rank import models

    facts = torch_facts(gpus=False)
    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": facts["torch"],
        "torch_cuda": facts["torch_cuda"],
        "torchvision": models.torchvision_version(),
        "torchvision_compiled_ops": models.torchvision_has_compiled_ops(),
        "bench": __version__,
    }
    if torch.cuda.is_available():
        versions["cudnn"] = torch.backends.cudnn.version()
        versions["nccl"] = facts["nccl"]
    return versions


def collect_system_info(env: Environment) -> dict[str, Any]:
    gpu = env.device == "cuda"
    topology = (
        run_here(["nvidia-smi", "topo", "-m"], 30) if gpu and shutil.which("nvidia-smi") else None
    )
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": env.cores,
        "memory_gb": _memory_gb(),
        "device": env.device,
        "gpu_name": env.gpu_name,
        "gpu_count": env.gpu_count,
        "nvml": gpu_inventory() if gpu else {"error": "no CUDA GPU visible"},
        "topology": topology.stdout if topology and topology.returncode == 0 else None,
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

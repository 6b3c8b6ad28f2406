"""What a machine has: cores, GPUs and their capability, the software versions that must agree
across nodes, the Horovod build, and the route toward the rendezvous host.

One module answers it for every caller: local detection (`local_environment`, for this
machine), the multi-node survey (`survey`, run on each node by bench.launchers.cluster)
and the version comparison (bench.launchers.versions, over `NodeInfo`s). What a machine offers
to a sweep (`Environment`, with its `HorovodStatus`) is derived from NodeInfos in one place
(`environment_of`), so bf16 and TF32 support mean the same on one machine and on a cluster.

The sweep's record of the machine it ran on is here too (`collect_system_info`, saved once per
sweep in sweep.jsonl: GPU models, driver, memory, `nvidia-smi topo -m`, torch/CUDA/cuDNN/NCCL/
Horovod versions, NCCL_* and related environment variables, host, CPU, git SHA); the GPU
telemetry sampled during a run's timed window lives with the ranks (bench.shared.telemetry).

Importable without torch: torch is imported inside the functions that query it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import shutil
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from bench import __version__
from bench.gpu_defaults import AMPERE
from bench.launchers import COLLECTIVE_PREFIXES
from bench.launchers.sites import probe_json, run_here
from bench.paths import REPO_ROOT

SURVEY_MARKER = "@@bench-node"


def cpu_cores() -> int:
    """Cores this process may run on (respects taskset/cgroup cpusets, unlike os.cpu_count)."""
    return len(os.sched_getaffinity(0))


# Native bf16 and TF32 math arrive with compute capability 8.0 (AMPERE). Older GPUs may emulate
# bf16 (torch.cuda.is_bf16_supported() can say True there), which a benchmark must not count.
def bf16_supported(capability: tuple[int, int] | None) -> bool:
    return capability is not None and tuple(capability) >= AMPERE


tf32_supported = bf16_supported


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def nvidia_driver_version() -> str | None:
    """The loaded kernel module's version (what CUDA will actually talk to), else nvidia-smi's."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if match:
            return match.group(1)
    except OSError:
        pass
    done = run_here(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30)
    words = done.stdout.split()
    return words[0] if done.returncode == 0 and words else None


def route_to(target: str) -> tuple[str | None, str | None]:
    """(source address, interface) this node uses to reach target.

    A UDP connect picks the route without sending anything. The interface is the one holding
    that address, so on the target itself it is the real NIC, not lo.
    """
    family, _, _, _, sockaddr = socket.getaddrinfo(target, 9, 0, socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(sockaddr)
        address = s.getsockname()[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == address for a in addresses):
            return address, name
    return address, None


# The wheels that provide the `tensorflow` module (PyPI: tensorflow, whose [and-cuda] extra adds
# its CUDA 12 libraries, and tensorflow-cpu; checked 2026-11-25).
TENSORFLOW_WHEELS = ("tensorflow", "tensorflow-cpu")
# roles/python_env installs TensorFlow in its own environment beside torch's, <env>-tf
# (python_env_tensorflow_path's default): its CUDA 12 wheels and torch's CUDA 13 ones write
# the same files (the role's tasks/tensorflow.yml has the evidence).
TENSORFLOW_ENV_SUFFIX = "-tf"


def tensorflow_env(python: str = sys.executable) -> tuple[str, str | None]:
    """(interpreter, TensorFlow version or None) of the TensorFlow the tf launcher runs: the
    one in `python`'s environment, else the one in the python_env role's environment beside it
    (<env>-tf). `python` is an environment's bin/python (not resolved: a venv's links out)."""
    prefix = Path(python).parent.parent
    beside = Path(f"{prefix}{TENSORFLOW_ENV_SUFFIX}")
    for env in (prefix, beside):  # metadata only, no import
        for site in sorted(env.glob("lib/python3*/site-packages")):
            for dist in metadata.distributions(path=[str(site)]):
                # a wheel's name may be written tensorflow_cpu (PEP 503 normalises - _ . alike)
                if re.sub(r"[-_.]+", "-", (dist.name or "").lower()) in TENSORFLOW_WHEELS:
                    return str(env / "bin" / Path(python).name), dist.version
    return python, None


def torch_facts(gpus: bool = True) -> dict[str, Any]:
    """torch's version and CUDA build, the NCCL compiled into it, and (gpus=True) how many GPUs
    it sees, GPU 0's name and compute capability. Querying a GPU initialises CUDA in this
    process: the sweep's own process asks a child instead (local_environment)."""
    info: dict[str, Any] = {
        "torch": _dist_version("torch"),
        "torch_cuda": None,
        "nccl": None,
        "gpus": 0,
        "gpu_name": "",
        "gpu_capability": None,
        "gpu_memory_gb": 0.0,
    }
    if not info["torch"]:
        return info
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        if torch.version.cuda:
            # NCCL's version is compiled into torch's CUDA builds; no GPU needed.
            info["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
            if gpus and torch.cuda.is_available():
                info["gpus"] = torch.cuda.device_count()
                info["gpu_name"] = torch.cuda.get_device_name(0)
                info["gpu_capability"] = list(torch.cuda.get_device_capability(0))
                info["gpu_memory_gb"] = torch.cuda.get_device_properties(0).total_memory / 1e9
    except Exception as err:
        info["torch_error"] = f"{type(err).__name__}: {err}"
    return info


def survey(target: str = "", versions: bool = True) -> dict[str, Any]:
    """This node's facts that must agree across nodes, and its route to the rendezvous host."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "cores": cpu_cores(),
    }
    if versions:
        info.update(torch_facts(), horovod=_dist_version("horovod"))
        info["tensorflow_python"], info["tensorflow"] = tensorflow_env()
        info["driver"] = nvidia_driver_version()
        info["driver_branch"] = info["driver"].split(".")[0] if info["driver"] else None
    if target:
        try:
            info["address"], info["interface"] = route_to(target)
        except OSError as err:
            info["route_error"] = f"cannot route to {target}: {err}"
    return info


@dataclass(frozen=True)
class NodeInfo:
    """What the survey found on one node."""

    host: str
    hostname: str
    python: str
    torch: str | None = None
    torch_cuda: str | None = None
    nccl: str | None = None
    horovod: str | None = None
    tensorflow: str | None = None
    tensorflow_python: str | None = None  # the interpreter of the environment that has it
    driver: str | None = None
    driver_branch: str | None = None
    gpus: int = 0
    gpu_name: str = ""
    gpu_capability: tuple[int, int] | None = None
    gpu_memory_gb: float = 0.0  # total memory of GPU 0 (bench.gpu_defaults picks the batch)
    cores: int = 0
    address: str | None = None
    interface: str | None = None
    route_error: str | None = None

    @classmethod
    def from_survey(cls, host: str, data: Mapping[str, Any]) -> NodeInfo:
        """A node's survey (keys this version does not know are left out, nulls default)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"host"}
        fields = {k: v for k, v in data.items() if k in known and v is not None}
        if fields.get("gpu_capability"):
            fields["gpu_capability"] = tuple(fields["gpu_capability"])
        return cls(host=host, **{"hostname": host, "python": "", **fields})


def survey_line(info: Mapping[str, Any]) -> str:
    return f"{SURVEY_MARKER} {json.dumps(info)}"


def survey_records(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The survey lines among other output (a line may carry a prefix before the marker)."""
    records = []
    for line in lines:
        _, marker, payload = line.partition(SURVEY_MARKER + " ")
        if marker:
            records.append(dict(json.loads(payload)))
    return records


@dataclass(frozen=True)
class HorovodStatus:
    """Whether Horovod works here (horovod_status), and why not."""

    available: bool
    version: str = ""
    nccl_built: bool | None = None
    reason: str = ""  # why it is unavailable

    def problem(self, device: str) -> str:
        """Why Horovod cannot run a sweep on `device`, or "" if it can."""
        if not self.available:
            return self.reason or "Horovod is not installed"
        if device == "cuda" and self.nccl_built is False:
            return (
                f"Horovod {self.version} was built without NCCL: GPU allreduce would go through "
                "host memory (about half the per-GPU throughput, horovod#2686); rebuild with "
                "HOROVOD_GPU_OPERATIONS=NCCL"
            )
        return ""


@dataclass(frozen=True)
class Environment:
    """What this machine offers, detected once here (local_environment, or the nodes' survey
    for a multi-node sweep: environment_of)."""

    device: str  # "cuda" when GPUs are visible, else "cpu"
    gpu_count: int
    gpu_name: str
    bf16_supported: bool
    tf32_supported: bool
    cores: int
    horovod: HorovodStatus
    tensorflow: str | None = None  # the installed TensorFlow's version (every node's), or None
    gpu_capability: tuple[int, int] | None = None  # the smallest node's GPU 0
    gpu_memory_gb: float = 0.0


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
    found = probe_json([python, "-c", _HOROVOD_PROBE], timeout_s=180)
    if isinstance(found, str):
        return HorovodStatus(False, reason=f"import horovod.torch failed: {found}")
    if not found["gloo"]:
        return HorovodStatus(False, found["version"], found["nccl"], "Horovod built without Gloo")
    return HorovodStatus(True, found["version"], found["nccl"])


def environment_of(infos: Sequence[NodeInfo], horovod: HorovodStatus) -> Environment:
    """What the machines offer a sweep: the smallest node counts (GPUs, capability, cores)."""
    gpus = min(i.gpus for i in infos)
    capability = min((i.gpu_capability or (0, 0)) for i in infos) if gpus else None
    return Environment(
        device="cuda" if gpus > 0 else "cpu",
        gpu_count=gpus,
        gpu_name=infos[0].gpu_name if gpus else "",
        bf16_supported=bf16_supported(capability),
        tf32_supported=tf32_supported(capability),
        cores=min(i.cores for i in infos),
        horovod=horovod,
        tensorflow=infos[0].tensorflow if all(i.tensorflow for i in infos) else None,
        gpu_capability=capability,
        gpu_memory_gb=min(float(i.gpu_memory_gb or 0.0) for i in infos) if gpus else 0.0,
    )


_GPU_PROBE = "import json; from bench.machine import torch_facts; print(json.dumps(torch_facts()))"


def local_environment(python: str = sys.executable, check_horovod: bool = True) -> Environment:
    """This machine, without creating a CUDA context in the sweep's process (that would hold
    memory on GPU 0 for the whole sweep): the GPUs are queried by a child."""
    import torch

    info = {**survey(versions=False), "tensorflow": tensorflow_env(python)[1]}
    if torch.cuda.is_available():
        found = probe_json([python, "-c", _GPU_PROBE], timeout_s=180)
        if isinstance(found, str) or not found.get("gpus"):
            reason = found if isinstance(found, str) else found.get("torch_error", "no GPU seen")
            raise RuntimeError(f"CUDA is available but querying GPU 0 failed: {reason}")
        info.update(found)
    horovod = (
        horovod_status(python)
        if check_horovod
        else HorovodStatus(False, reason="not checked: not in this sweep")
    )
    return environment_of([NodeInfo.from_survey("localhost", info)], horovod)


ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MASTER_ADDR")


def relevant_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """NCCL_*, GLOO_*, HOROVOD_* and the few other variables that change distributed results."""
    relevant = (k for k in sorted(environ) if k.startswith(COLLECTIVE_PREFIXES) or k in ENV_NAMES)
    return {k: environ[k] for k in relevant}


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

    from bench.shared import models

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
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "device": env.device,
        "gpu_name": env.gpu_name,
        "gpu_count": env.gpu_count,
        "nvml": gpu_inventory() if gpu else {"error": "no CUDA GPU visible"},
        "topology": topology.stdout if topology and topology.returncode == 0 else None,
        "versions": software_versions(),
        "horovod": dataclasses.asdict(env.horovod),
        "environment": relevant_environment(),
        "git": git_revision(),
    }

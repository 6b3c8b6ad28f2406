#!/usr/bin/env python3
"""Stand-ins for the tools playbooks/verify.yml runs, and the files it reads (TEST FIXTURES).

Every tool name in this directory (and env/bin/python, env/bin/horovodrun) links here; the table
TOOLS maps an invocation to the output the real tool printed, kept under fixtures/ with its source
named beside its entry. GPURIG_STANDIN_FAULTS (comma-separated check names of verify.yml) picks,
per invocation, the faulty output listed for that check instead of the healthy one, so one run can
flip one check or all. build_root(root, faults) lays out the files verify.yml reads (PCI devices,
the kernel module's version, headers) under root, and beside them one wrapper per tool that sets
those faults and runs the tool here, so hosts given different roots (by their own verify_*
variables) read different outputs without any environment. To add a tool's output: a fixture file,
a TOOLS entry and, for a new tool, its link to standin.py here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
# The health checks' readings (tests/fixtures/health, sources in its SOURCES.md) serve as they are.
HEALTH = HERE.parents[1] / "fixtures" / "health"
FAULTS_ENV = "GPURIG_STANDIN_FAULTS"


@dataclass(frozen=True)
class Output:
    fixture: str | Path  # under FIXTURES, or a path (HEALTH / name)
    rc: int = 0
    stream: str = "stdout"


@dataclass(frozen=True)
class Tool:
    healthy: Output
    # (checks whose fault selects it, output): the first entry whose checks are all faulty wins,
    # so an entry serving two faults at once goes before the entries for each alone.
    faulty: tuple[tuple[tuple[str, ...], Output], ...] = ()


@dataclass(frozen=True)
class Report:
    """A report in the format of one of our playbooks/files/verify_*.py scripts: faults patch it."""

    healthy: str | Path  # under FIXTURES, or a path (HEALTH / name)
    patches: dict[str, dict] = field(default_factory=dict)  # check -> {"set": {...}, "drop": [...]}


# Sources, checked 2026-11-25 (search tool, issues corpus, unless said otherwise):
# - nvidia-smi -L: github.com/influxdata/telegraf/issues/5812 (4x A100-SXM4-80GB, GPU 0 in MIG
#   mode).
# - nvidia-smi's failure: the message of github.com/NVIDIA/nvidia-docker issues, exit status 9 as
#   tests/integration/test_bench_playbook_gpus.py already uses.
# - --query-gpu ... --format=csv,noheader: one line per GPU, fields joined by ", " (the layout of
#   github.com/Ricks-Lab/gpu-utils/issues/83 and akash-network/provider-configs/pull/91); the bus
#   ids are ours, 580.105.08 is a released driver (github.com/LibreELEC/LibreELEC.tv/pull/10657),
#   565.57.01 a branch compat.yml does not list (github.com/nix-community/nixGL/issues/186).
# - systemctl is-active prints the unit's state ("active", "inactive") and exits 0 only if active
#   (systemd's man page systemctl(1)); 3 is what systemctl returns for an inactive unit.
# - nvcc --version: fixtures/nvcc-version.txt is the CUDA 13.0 nvcc installed on the development
#   machine (/usr/local/cuda-13.0, V13.0.88); the 11.1 one is github.com/pytorch/builder/pull/580.
# - horovodrun --check-build: the format string of check_build() in horovod/runner/launch.py of the
#   Horovod 0.28.1 sdist, filled for a PyTorch + Gloo + NCCL build (as ENVIRONMENT.md's build).
# - all_reduce_perf: the header and columns of nccl-tests 2.20.0
#   (github.com/NVIDIA/dgx-spark-playbooks/pull/103), rows 32 KB-32 MB of an 8-rank run
#   (github.com/kvcache-ai/Mooncake/pull/3484); the missing-library failure is
#   github.com/NVIDIA/nccl-tests/issues/85 (exit 127, the dynamic loader's message on stderr).
# - docker run --gpus all ... nvidia-smi -L: nvidia-smi -L's format (above); the failure without
#   the NVIDIA runtime: github.com/NVIDIA/nvidia-docker/issues/1637 (docker exits 125).
# - The health checks (playbooks/tasks/verify_health.yml) read the files of tests/fixtures/health,
#   each named with its thread in SOURCES.md there: journalctl -k -b (leptonai/gpud#1209, an Xid 79
#   line of NVIDIA/NVSentinel#155), nvidia-smi nvlink -s (NVIDIA/k8s-test-infra#371, links down:
#   Azure/azhpc-diagnostics#73), nvidia-smi -q -d PERFORMANCE under load (NVIDIA/nvidia-docker#821,
#   slowed: l4rz/reverse-engineering-dell-idrac-to-get-rid-of-gpu-throttling). dcgmi diag: the
#   healthy table is the Deployment part of a `-r 3` run (NVIDIA/DCGM#55), the failing one the
#   Integration part of a `-r 2` run (NVIDIA/DCGM#49); both are served for -r 3, the level
#   test_verify_checks passes (the acceptance level; level 3 is the long suite, docs.nvidia.com/
#   datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html).
QUERY = (
    "--query-gpu=index,pci.bus_id,driver_version,persistence_mode",
    "--format=csv,noheader",
)
CONTAINER = ("run", "--rm", "--pull", "missing", "--gpus", "all")
# The ECC and PCIe link checks' query (gpurig_health.commands' gpu_query); its
# fixtures' layout is real, their values ours (tests/fixtures/health/SOURCES.md).
HEALTH_QUERY = (
    "--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,pcie.link.gen.current,pcie.link.gen.max,"
    "pcie.link.width.current,pcie.link.width.max"
)
TOOLS: dict[tuple[str, ...], Tool] = {
    ("nvidia-smi", "-L"): Tool(
        Output("nvidia-smi-L.txt"),
        ((("nvidia_smi_sees_all_gpus",), Output("nvidia-smi-failed.txt", rc=9)),),
    ),
    ("nvidia-smi", *QUERY): Tool(
        Output("nvidia-smi-query.txt"),
        (
            (
                ("compat_driver_branch", "persistence_mode"),
                Output("nvidia-smi-query-unlisted-branch-persistence-off.txt"),
            ),
            (("compat_driver_branch",), Output("nvidia-smi-query-unlisted-branch.txt")),
            (("persistence_mode",), Output("nvidia-smi-query-persistence-off.txt")),
        ),
    ),
    ("systemctl", "is-active", "nvidia-fabricmanager.service"): Tool(
        Output("systemctl-active.txt"),
        ((("fabric_manager",), Output("systemctl-inactive.txt", rc=3)),),
    ),
    ("nvcc", "--version"): Tool(
        Output("nvcc-version.txt"),
        (
            (("cuda_release",), Output("nvcc-version-11.1.txt")),
            (("compat_cuda",), Output("nvcc-version-11.1.txt")),
        ),
    ),
    ("horovodrun", "--check-build"): Tool(
        Output("horovodrun-check-build.txt"),
        ((("horovod_build",), Output("horovodrun-check-build-gloo-only.txt")),),
    ),
    ("all_reduce_perf", "-b", "8", "-e", "256M", "-f", "2", "-g", "4"): Tool(
        Output("all_reduce_perf.txt"),
        (
            (
                ("nccl_tests_allreduce",),
                Output("all_reduce_perf-no-libnccl.txt", rc=127, stream="stderr"),
            ),
        ),
    ),
    # At a floor's size (a test's own floor of 32M for these four A100s): the same real report,
    # whose 32 MB line is the one result line at that size, for the first cycles (-N 5) and for
    # the rest up to verify_hardware_max_repeats (-N 25).
    **{
        ("all_reduce_perf", "-b", "32M", "-e", "32M", "-g", "4", "-N", cycles): Tool(
            Output("all_reduce_perf.txt")
        )
        for cycles in ("5", "25")
    },
    ("docker", *CONTAINER, "nvidia/cuda:12.2.2-base-ubuntu22.04", "nvidia-smi", "-L"): Tool(
        Output("docker-run-nvidia-smi-L.txt"),
        ((("container_gpus",), Output("docker-no-gpu-driver.txt", rc=125, stream="stderr")),),
    ),
    ("journalctl", "-k", "-b"): Tool(
        Output(HEALTH / "journalctl-k.healthy.txt"),
        ((("xid_errors",), Output(HEALTH / "journalctl-k.faulty.txt")),),
    ),
    ("nvidia-smi", "nvlink", "-s"): Tool(
        Output(HEALTH / "nvidia-smi-nvlink-s.healthy.txt"),
        ((("nvlink_links",), Output(HEALTH / "nvidia-smi-nvlink-s.faulty.txt")),),
    ),
    ("dcgmi", "health", "-s", "a"): Tool(Output(HEALTH / "dcgmi-health-s-a.txt")),
    ("dcgmi", "health", "-c", "-j"): Tool(
        Output(HEALTH / "dcgmi-health-c-j.healthy.json"),
        ((("dcgm_health",), Output(HEALTH / "dcgmi-health-c-j.faulty.json")),),
    ),
    ("dcgmi", "diag", "-r", "3"): Tool(
        Output(HEALTH / "dcgmi-diag.healthy.txt"),
        ((("dcgm_diag",), Output(HEALTH / "dcgmi-diag.faulty.txt")),),
    ),
    # Run by verify_gpu_load.py while the GPUs are busy (see LOAD_SCRIPT).
    ("nvidia-smi", "-q", "-d", "PERFORMANCE"): Tool(
        Output(HEALTH / "nvidia-smi-q-performance.healthy.txt"),
        ((("throttling",), Output(HEALTH / "nvidia-smi-q-performance.faulty.txt")),),
    ),
    ("nvidia-smi", HEALTH_QUERY, "--format=csv,noheader,nounits"): Tool(
        Output(HEALTH / "nvidia-smi-query-gpu-health.healthy.txt"),
        (
            (
                ("ecc_uncorrectable", "pcie_link"),
                Output(HEALTH / "nvidia-smi-query-gpu-health.ecc-pcie.txt"),
            ),
            (("ecc_uncorrectable",), Output(HEALTH / "nvidia-smi-query-gpu-health.ecc.txt")),
            (("pcie_link",), Output(HEALTH / "nvidia-smi-query-gpu-health.pcie.txt")),
        ),
    ),
}

# The environment's python runs our scripts (playbooks/files/verify_*.py, copied to a temporary
# path by ansible.builtin.script): keyed by the script's name, their format is the script's own.
REMAP_PENDING = [
    {**gpu, "remapped_rows": {**gpu["remapped_rows"], "uncorrectable": 4, "pending": True}}
    if gpu["index"] == 2
    else gpu
    for gpu in json.loads((FIXTURES / "verify_memory_errors.json").read_text())["gpus"]
]
# verify_hardware.py's real reading on one H200 (tests/fixtures/health/SOURCES.md), and the same
# with host-to-device halved, as a link trained at x8 of x16 gives (derived, not a reading).
H200_HARDWARE = json.loads((HEALTH / "verify_hardware-h200.json").read_text())["gpus"]
H2D_HALVED = [
    {
        **gpu,
        "h2d_gbs": {
            **gpu["h2d_gbs"],
            **{k: gpu["h2d_gbs"][k] / 2 for k in ("median", "best")},
            "samples": [x / 2 for x in gpu["h2d_gbs"]["samples"]],
        },
    }
    for gpu in H200_HARDWARE
]
# verify_burnin.py's real reading on one H100 (tests/fixtures/health/SOURCES.md), and the same with
# its last 5 of 18 windows 10 % slower, as a GPU that heats up gives (derived, not a reading).
H100_BURNIN = json.loads((HEALTH / "verify_burnin-h100.json").read_text())["gpus"]
BURNIN_FALLING = [
    {**gpu, "windows": gpu["windows"][:-5] + [w * 0.9 for w in gpu["windows"][-5:]]}
    for gpu in H100_BURNIN
]
REPORTS: dict[str, Report] = {
    "verify_torch.py": Report(
        "verify_torch.json",
        {
            # torch.cuda.is_available() false: the script reports no devices and no NCCL.
            "torch_gpus_nccl": {"set": {"devices": 0, "nccl": None}, "drop": ["ones", "allreduce"]},
            # torch from the CUDA 12 index (compat.yml's cu126) on a CUDA 13 toolkit.
            "compat_torch_cuda_major": {"set": {"torch": "2.14.1+cu126", "cuda": "12.6"}},
        },
    ),
    "verify_nccl_runtime.py": Report(
        "verify_nccl_runtime.json",
        {
            # LD_LIBRARY_PATH put the system's libnccl2 (nccl role) beside the wheel's.
            "nccl_runtime": {
                "set": {
                    "mapped": [
                        "/opt/venvs/train/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7",
                    ]
                }
            }
        },
    ),
    "verify_cupy.py": Report(
        "verify_cupy.json",
        {"cupy_matmul": {"set": {"gpus": [{"device": 0, "max_relative_error": 0.98}]}}},
    ),
    "verify_memory_errors.py": Report(
        "verify_memory_errors.json",
        # GPU 2 with four rows remapped for uncorrectable errors and the remap waiting for a reset:
        # the values of the real reading in leptonai/gpud#80 ("Uncorrectable Error : 4", "Pending :
        # Yes"), in the script's own format.
        {"remapped_rows": {"set": {"gpus": REMAP_PENDING}}},
    ),
    "verify_hardware.py": Report(
        HEALTH / "verify_hardware-h200.json", {"hardware_floors": {"set": {"gpus": H2D_HALVED}}}
    ),
    "verify_burnin.py": Report(
        HEALTH / "verify_burnin-h100.json", {"burn_in": {"set": {"gpus": BURNIN_FALLING}}}
    ),
    "verify_tensorflow.py": Report(
        "verify_tensorflow.json",
        # A CPU-only package (tensorflow-cpu) lists no GPU.
        {"tensorflow_gpus_matmul": {"set": {"cuda_build": False, "gpus": []}}},
    ),
}


# playbooks/files/verify_gpu_load.py SECONDS -- COMMAND... [-- COMMAND...]: the real script loads
# every GPU with torch, runs the commands meanwhile and prints what each printed. Without GPUs the
# stand-in python runs the script's own parsing and reading (its commands() and read(), imported
# from the copy Ansible runs) minus the load, so the commands verify.yml built run here, through
# these stand-ins, and their output reaches the filters as the script reports it.
LOAD_SCRIPT = "verify_gpu_load.py"
# The Slurm health check verify.yml installs (its first line names the environment's python) is
# ours, not a tool: the stand-in python hands it to the real interpreter, and the tools it runs are
# these stand-ins, as healthcheck.json names them.
HEALTHCHECK = "gpurig-healthcheck"
HARDWARE_SCRIPT = "verify_hardware.py"


def faults() -> set[str]:
    return {name.strip() for name in os.environ.get(FAULTS_ENV, "").split(",") if name.strip()}


def tool_output(argv: list[str], active: set[str]) -> Output | None:
    tool = TOOLS.get((Path(argv[0]).name, *argv[1:]))
    if tool is None:
        return None
    for checks, output in tool.faulty:
        if set(checks) <= active:
            return output
    return tool.healthy


def report(script: str, active: set[str]) -> str | None:
    entry = REPORTS.get(Path(script).name)
    if entry is None:
        return None
    found = json.loads((FIXTURES / entry.healthy).read_text())
    for check, patch in entry.patches.items():
        if check in active:
            found.update(patch.get("set", {}))
            for key in patch.get("drop", []):
                found.pop(key, None)
    return json.dumps(found)


# ---- The files verify.yml reads: laid out under a root the test makes ---------------------------
# PCI devices as sysfs lists them (vendor, class; as tests/integration/test_bench_playbook_gpus.py
# lays them out): 0x10de is NVIDIA, class 0x0302 a 3D controller (a GPU), 0x0680 a bridge (the
# class NVSwitches carry), 0x8086/0x0600 an Intel host bridge. An HGX A100 board carries six
# NVSwitches beside its GPUs; here four GPUs, as the nvidia-smi -L fixture lists.
PCI_GPU = ("0x10de", "0x030200")
PCI_NVSWITCH = ("0x10de", "0x068000")
PCI_OTHER = ("0x8086", "0x060000")


def write_wrappers(tools: Path, into: Path, active: set[str]) -> None:
    """into/<name> per tool linked in tools: sets these faults, runs the tool under its name."""
    into.mkdir(parents=True)
    for link in sorted(tools.iterdir()):
        if link.is_symlink():
            wrapper = into / link.name
            wrapper.write_text(
                "#!/bin/sh\n"
                f"# Stand-in {link.name} with faults {sorted(active)} ({__file__}).\n"
                f"{FAULTS_ENV}={shlex.quote(','.join(sorted(active)))}\n"
                f"export {FAULTS_ENV}\n"
                f'exec {shlex.quote(str(link))} "$@"\n'
            )
            wrapper.chmod(0o755)


def build_root(root: Path, active: set[str]) -> dict[str, str | int]:
    """Lay out the files and tools under root; return verify.yml's variables that point at them.

    Per host, give them as facts (set_fact in a play before verify.yml) or extra variables:
    verify.yml declares them as play variables, which outrank inventory host variables (Ansible's
    variable precedence, docs.ansible.com playbooks_variables, checked 2026-11-25).
    """
    gpus = 0 if "gpus_present" in active else 4
    devices = [PCI_GPU] * gpus + [PCI_NVSWITCH] * 6 + [PCI_OTHER]
    pci = root / "sys/bus/pci/devices"
    for number, (vendor, klass) in enumerate(devices):
        device = pci / f"0000:{number + 1:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(klass + "\n")
    # /proc/driver/nvidia/version: the open module's line (github.com/nix-community/nixGL/issues/
    # 186, 565.57.01); the healthy file is that line with the driver nvidia-smi reports.
    version = root / "proc/driver/nvidia/version"
    version.parent.mkdir(parents=True)
    module = "-565" if "driver_branch" in active else ""
    version.write_text((FIXTURES / f"proc-driver-nvidia-version{module}.txt").read_text())
    # Headers: NVIDIA's own files (the nvidia-cudnn-cu13 / nvidia-nccl-cu13 wheels); a node
    # without the -dev package has none.
    include = root / "usr/include"
    include.mkdir(parents=True)
    for name, check in (("cudnn_version.h", "cudnn_version"), ("nccl.h", "nccl_version")):
        if check not in active:
            (include / name).write_text((FIXTURES / name).read_text())
    # The tools: root/bin/<tool>, and the environment's root/env/bin/{python,horovodrun}.
    bin_dir, env = root / "bin", root / "env"
    write_wrappers(HERE, bin_dir, active)
    write_wrappers(HERE / "env" / "bin", env / "bin", active)
    return {
        "verify_pci_devices_dir": str(pci),
        "verify_driver_version_file": str(version),
        "verify_cudnn_header": str(include / "cudnn_version.h"),
        "verify_nccl_header": str(include / "nccl.h"),
        "verify_nvidia_smi": str(bin_dir / "nvidia-smi"),
        "verify_systemctl": str(bin_dir / "systemctl"),
        "verify_nvcc_path": str(bin_dir / "nvcc"),
        "verify_docker": str(bin_dir / "docker"),
        "verify_nccl_tests_bin": str(bin_dir),
        "verify_python_env_path": str(env),
        "verify_tensorflow_env_path": str(env),
        "verify_journalctl": str(bin_dir / "journalctl"),
        "verify_dcgmi": str(bin_dir / "dcgmi"),
        # The GPUs the inventory expects: the four the bus shows, or (gpu_count's fault) the eight
        # of an HGX A100 board, the board whose six NVSwitches the bus lists, four of them missing.
        "verify_expected_gpus": 8 if "gpu_count" in active else gpus,
    }


def load_script(path: str):
    """One of our playbooks/files scripts, imported from the copy Ansible runs."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def run_under_load(argv: list[str]) -> int:
    """argv: python, verify_gpu_load.py, SECONDS, -- COMMAND...: the script, without the load."""
    script = load_script(argv[1])
    _, commands = script.commands(argv[1:])
    print(script.read(commands))
    return 0


def main(argv: list[str]) -> int:
    active = faults()
    if Path(argv[0]).name == "python" and len(argv) > 1 and Path(argv[1]).name == HEALTHCHECK:
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    if Path(argv[0]).name == "python" and len(argv) > 3 and Path(argv[1]).name == LOAD_SCRIPT:
        return run_under_load(argv)
    if Path(argv[0]).name == "python" and len(argv) > 1:
        printed = report(argv[1], active)
        if printed is not None and Path(argv[1]).name == HARDWARE_SCRIPT:
            # The script attaches each figure's interval and the floor of its GPU's model (from
            # --floors) to what it measured; so does the stand-in, with the script's own code.
            script = load_script(argv[1])
            options = script.parse(argv[2:])
            found = script.attach_floors(json.loads(printed), options.floors, options.confidence)
            printed = json.dumps(found)
        if printed is not None:
            print(printed)
            return 0
    output = tool_output(argv, active)
    if output is None:
        print(f"stand-in: no fixture for {argv!r} ({__file__})", file=sys.stderr)
        return 127
    stream = sys.stdout if output.stream == "stdout" else sys.stderr
    stream.write((FIXTURES / output.fixture).read_text())
    return output.rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))

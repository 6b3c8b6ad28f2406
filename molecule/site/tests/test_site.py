"""The NVIDIA stack site.yml leaves on a host: every component at its version, locked together."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

# Defaults of the roles (no variables set in this scenario), per OS from compat.yml: driver branch
# 580 everywhere, CUDA 12.9 where NVIDIA publishes it and 13.0 on Debian 13 (its only CUDA), each
# with compat.yml's cuDNN 9 and NCCL. The stand-in repo also offers other builds of the same
# branch/release (e.g. libnccl2 2.28.9-1), which the pins and holds must keep out.
DRIVER_VERSION = "580.105.08"
CUDA = {"debian12-site": "12.9", "ubuntu2004-site": "12.9", "debian13-site": "13.0"}
TOOLKIT_BUILD = {"12.9": "12.9.1-1", "13.0": "13.0.2-1"}
# The driver package: branch-named in NVIDIA's Ubuntu repos, Debian's name in its Debian repos.
DRIVER = {
    "debian12-site": "nvidia-driver",
    "ubuntu2004-site": "nvidia-driver-580",
    "debian13-site": "nvidia-driver",
}


def expected_stack(hostname):
    cuda = CUDA[hostname]
    major, minor = cuda.split(".")
    return {
        "cuda-drivers-580": DRIVER_VERSION,
        DRIVER[hostname]: DRIVER_VERSION,
        f"cuda-toolkit-{major}-{minor}": TOOLKIT_BUILD[cuda],
        f"cudnn9-cuda-{major}": "9.13.0.50-1",
        f"libcudnn9-cuda-{major}": "9.13.0.50-1",
        f"libcudnn9-dev-cuda-{major}": "9.13.0.50-1",
        "libnccl2": f"2.28.3-1+cuda{cuda}",
        "libnccl-dev": f"2.28.3-1+cuda{cuda}",
    }


@pytest.fixture
def stack(host):
    return expected_stack(host.backend.get_hostname())


@pytest.fixture
def cuda(host):
    return CUDA[host.backend.get_hostname()]


def test_components_installed_at_their_versions(host, stack):
    wrong = {
        package: host.package(package).version if host.package(package).is_installed else None
        for package, version in stack.items()
        if not (
            host.package(package).is_installed and host.package(package).version.startswith(version)
        )
    }
    assert wrong == {}


def test_components_held_and_blacklisted(host, stack):
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert {package: selections.get(package) for package in stack} == dict.fromkeys(stack, "hold")
    assert [package for package in stack if f'"{package}$"' not in blacklist] == []


def test_nothing_in_the_stack_would_be_upgraded(host, stack, cuda):
    # libnccl2 2.28.9-1 is in the repo and newer than the pinned 2.28.3-1: a plain upgrade must
    # leave every component where it is.
    assert f"2.28.9-1+cuda{cuda}" in host.check_output("apt-cache madison libnccl2")
    plan = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    moved = [line for line in plan.splitlines() if line.startswith("Inst ")]
    assert [line for line in moved if line.split()[1] in stack] == []


def test_one_driver_branch_only(host):
    # The toolkit must not have pulled the unversioned cuda-drivers, which follows the
    # newest branch, and no package of another branch may be installed.
    names = host.check_output("dpkg-query --show --showformat='${Package} ${Version}\\n'")
    packages = dict(line.split() for line in names.splitlines())
    assert "cuda-drivers" not in packages
    assert [
        name
        for name in packages
        if re.match(r"(nvidia-driver|cuda-drivers)-(?!580(-open)?$)", name)
    ] == []
    libcuda = packages.get("libcuda1") or packages.get("libnvidia-compute-580")
    assert libcuda is not None and libcuda.startswith("580.")


def test_repository_defined_once(host):
    targets = host.check_output("apt-get indextargets --format '$(REPO_URI)'").splitlines()
    nvidia = {uri for uri in targets if "/repos/" in uri}
    assert len(nvidia) == 1
    assert host.run("LC_ALL=C apt-get update").stderr.count("W:") == 0


def test_persistence_daemon_running(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert service.is_running


def test_no_fabric_manager_without_nvswitch(host):
    assert not host.package("nvidia-fabricmanager-580").is_installed


def test_nouveau_blacklisted(host):
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string


def test_cuda_environment(host, cuda):
    assert host.check_output("readlink -f /usr/local/cuda") == f"/usr/local/cuda-{cuda}"
    assert host.check_output("bash -lc 'echo $PATH'").split(":")[0] == "/usr/local/cuda/bin"
    assert "/usr/local/cuda/lib64" in host.check_output("bash -lc 'echo $LD_LIBRARY_PATH'")
    assert "/usr/local/cuda/lib64:" in host.check_output("ldconfig -v 2>/dev/null | grep -v '^\\s'")


CORE_CHECKS = [
    "gpus_present",
    "nvidia_smi_sees_all_gpus",
    "driver_branch",
    "compat_driver_branch",
    "persistence_mode",
    "cuda_release",
    "compat_cuda",
    "cudnn_version",
    "nccl_version",
    "torch_gpus_nccl",
    "compat_torch_cuda_major",
    "horovod_build",
]


def test_verify_playbook_reports_every_check_as_json(host, playbook, tmp_path, cuda):
    # No GPU in a container: verify.yml must record the failed checks, write and print the JSON
    # summary, and exit non-zero. What the roles installed (cuDNN and NCCL headers at the
    # compat.yml versions) must be recorded as passed.
    name = host.backend.get_hostname()
    run = playbook(
        Path(__file__).resolve().parents[3] / "playbooks/verify.yml",
        limit=name,
        extra_vars={"verify_report_dir": str(tmp_path)},
    )
    assert run.rc != 0
    summary = json.loads((tmp_path / f"{name}.json").read_text())
    assert summary["host"] == name
    assert summary["os"] == {"debian12-site": "debian12", "debian13-site": "debian13"}.get(
        name, "ubuntu2004"
    )
    assert summary["passed"] is False
    checks = {check["check"]: check for check in summary["checks"]}
    # One entry per check, each name once; these in this order (later checks may follow, e.g. the
    # NCCL runtime and nccl-tests checks); Fabric Manager is checked only on NVSwitch hosts.
    names = [check["check"] for check in summary["checks"]]
    assert len(names) == len(set(names))
    assert "fabric_manager" not in names
    assert names[: len(CORE_CHECKS)] == CORE_CHECKS
    assert checks["gpus_present"]["passed"] is False
    assert checks["gpus_present"]["figures"]["pci_gpus"] == 0
    assert checks["cudnn_version"] == {
        "check": "cudnn_version",
        "passed": True,
        "figures": {"header": "9.13.0", "requested": "9.13.0.50"},
        "message": "",
    }
    assert checks["nccl_version"]["passed"] is True
    assert checks["nccl_version"]["figures"]["requested"] == "2.28.3-1"
    assert checks["cuda_release"]["figures"]["requested"] == cuda
    # CuPy's matrix product on every GPU (python_env installs CuPy by default): the wheel compat.yml
    # names for the OS's CUDA major, and a failure here (no GPU, and this scenario skips the python
    # roles, so no environment either).
    major = cuda.split(".")[0]
    assert checks["cupy_matmul"]["figures"]["package"] == f"cupy-cuda{major}x"
    assert checks["cupy_matmul"]["passed"] is False
    assert "cupy-cuda" in checks["cupy_matmul"]["message"]
    assert all(checks[c]["message"] for c in CORE_CHECKS if not checks[c]["passed"])
    # The same summary is printed, and the failure names the failed checks' count.
    assert f'"host": "{name}"' in run.stdout or f'\\"host\\": \\"{name}\\"' in run.stdout
    assert "check(s) failed on" in run.failures[name]


# What compat.yml says NVIDIA does not publish for an OS stops site.yml's preflight, host untouched.
REFUSED = {
    "ubuntu2004-site": (
        {"cuda_toolkit_version": "13.0"},
        "NVIDIA publishes no CUDA 13.0 for ubuntu2004",
    ),
    "debian13-site": (
        {"nvidia_driver_branch": "535", "cuda_toolkit_version": "12.2"},
        'nvidia_driver_branch "535" is not a branch NVIDIA publishes for debian13',
    ),
    "debian12-site": (
        {"cuda_toolkit_version": "13.0", "nvidia_driver_branch": "570"},
        "cuda_toolkit_version 13.0 needs driver branch 580 or newer",
    ),
}


def test_preflight_refuses_what_the_os_does_not_get(host, refused):
    extra_vars, expected = REFUSED[host.backend.get_hostname()]
    site = Path(__file__).resolve().parents[3] / "site.yml"
    message = refused(host, site, extra_vars)
    assert expected in message

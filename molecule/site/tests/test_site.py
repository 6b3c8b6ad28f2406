"""The NVIDIA stack site.yml leaves on a host: every component at its version, locked together."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

# Defaults of the roles (no variables set in this scenario), per OS from compat.yml: its default
# driver branch and CUDA release (13.4, 12.9 on Ubuntu 20.04, for which CUDA 13 is not published),
# each with compat.yml's cuDNN 9 and NCCL. Where compat.yml leaves the exact build open (the driver,
# the toolkit), the roles install the newest of the branch/release: the stand-in's newest. The
# stand-in also offers other builds of the same branch/release (e.g. a newer libnccl2), which the
# pins and holds must keep out.


def driver_package(distro: str, branch: str) -> str:
    """The driver package: branch-named in NVIDIA's Ubuntu repos, Debian's name in its Debian
    repos."""
    return f"nvidia-driver-{branch}" if distro.startswith("ubuntu") else "nvidia-driver"


def upstream(version: str) -> str:
    """580.105.08-1 -> 580.105.08."""
    return version.split("-", 1)[0]


@pytest.fixture
def stack(distro, defaults, standin):
    driver = upstream(standin.newest(f"cuda-drivers-{defaults.branch}", distro))
    toolkit = f"cuda-toolkit-{defaults.cuda_package_suffix}"
    cudnn = defaults.cudnn_package_version
    return {
        f"cuda-drivers-{defaults.branch}": driver,
        driver_package(distro, defaults.branch): driver,
        toolkit: standin.newest(toolkit, distro),
        f"cudnn9-cuda-{defaults.cuda_major}": cudnn,
        f"libcudnn9-cuda-{defaults.cuda_major}": cudnn,
        f"libcudnn9-dev-cuda-{defaults.cuda_major}": cudnn,
        "libnccl2": defaults.nccl_package_version,
        "libnccl-dev": defaults.nccl_package_version,
    }


@pytest.fixture
def cuda(defaults):
    return defaults.cuda


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


def test_nothing_in_the_stack_would_be_upgraded(host, stack, distro, defaults, standin):
    # The stand-in has a libnccl2 build for the same CUDA release newer than the pinned one: a plain
    # upgrade must leave every component where it is.
    suffix = f"+cuda{defaults.cuda}"
    newer = [v for v in standin.versions("libnccl2", distro) if v.endswith(suffix)][-1]
    assert newer != defaults.nccl_package_version, "the scenario needs a newer NCCL build"
    assert newer in host.check_output("apt-cache madison libnccl2")
    plan = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    moved = [line for line in plan.splitlines() if line.startswith("Inst ")]
    assert [line for line in moved if line.split()[1] in stack] == []


def test_one_driver_branch_only(host, defaults):
    # The toolkit must not have pulled the unversioned cuda-drivers, which follows the
    # newest branch, and no package of another branch may be installed.
    branch = defaults.branch
    names = host.check_output("dpkg-query --show --showformat='${Package} ${Version}\\n'")
    packages = dict(line.split() for line in names.splitlines())
    assert "cuda-drivers" not in packages
    assert [
        name
        for name in packages
        if re.match(rf"(nvidia-driver|cuda-drivers)-(?!{branch}(-open)?$)", name)
    ] == []
    libcuda = packages.get("libcuda1") or packages.get(f"libnvidia-compute-{branch}")
    assert libcuda is not None and libcuda.startswith(f"{branch}.")


def test_repository_defined_once(host):
    targets = host.check_output("apt-get indextargets --format '$(REPO_URI)'").splitlines()
    nvidia = {uri for uri in targets if "/repos/" in uri}
    assert len(nvidia) == 1
    assert host.run("LC_ALL=C apt-get update").stderr.count("W:") == 0


def test_repository_key_is_the_distros_own(host, distro, compat, fingerprints):
    # NVIDIA signs each repo directory with its own key (Debian 13: 8793F200.pub, the others
    # 3bf863cc.pub); the stand-in signs each with a throwaway key per key file name, so only the
    # key compat.yml names for the distro lets apt trust the directory.
    keys = json.loads(os.environ["STANDIN_NVIDIA_KEYS"])
    name = compat["distros"][distro]["key"]
    assert fingerprints(host, "/etc/apt/keyrings/nvidia-cuda.asc") == [keys[name]]
    if distro == "debian13":
        assert name == "8793F200.pub"
        assert keys[name] != keys["3bf863cc.pub"]


# persistenced, Fabric Manager and the nouveau blacklist: test_nvidia_driver.py and
# test_gpu_prereqs.py, on these same hosts.


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


def test_verify_playbook_reports_every_check_as_json(host, playbook, tmp_path, distro, defaults):
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
    assert summary["os"] == distro
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
        "figures": {
            "header": ".".join(defaults.cudnn.split(".")[:3]),
            "requested": defaults.cudnn,
        },
        "message": "",
    }
    assert checks["nccl_version"]["passed"] is True
    assert checks["nccl_version"]["figures"]["requested"] == defaults.nccl
    assert checks["cuda_release"]["figures"]["requested"] == defaults.cuda
    # CuPy's matrix product on every GPU (python_env installs CuPy by default): the wheel compat.yml
    # names for the OS's CUDA major, and a failure here (no GPU, and this scenario skips the python
    # roles, so no environment either).
    assert checks["cupy_matmul"]["figures"]["package"] == f"cupy-cuda{defaults.cuda_major}x"
    assert checks["cupy_matmul"]["passed"] is False
    assert "cupy-cuda" in checks["cupy_matmul"]["message"]
    assert all(checks[c]["message"] for c in CORE_CHECKS if not checks[c]["passed"])
    # The same summary is printed, and the failure names the failed checks' count.
    assert f'"host": "{name}"' in run.stdout or f'\\"host\\": \\"{name}\\"' in run.stdout
    assert "check(s) failed on" in run.failures[name]


# What compat.yml says NVIDIA does not publish for an OS stops site.yml's preflight, host untouched.
# The end-of-life branches are allowed here, so that each case meets the check it is about.
REFUSED = {
    "ubuntu2004": (
        {"gpurig_cuda_version": "13.0"},
        "NVIDIA publishes no CUDA 13.0 for ubuntu2004",
    ),
    "debian13": (
        {
            "gpurig_driver_branch": "535",
            "nvidia_driver_allow_eol_branch": True,
            "gpurig_cuda_version": "12.2",
        },
        'gpurig_driver_branch "535" is not a branch NVIDIA publishes for debian13',
    ),
    "ubuntu2604": (
        {"gpurig_driver_branch": "580"},
        'gpurig_driver_branch "580" is not a branch NVIDIA publishes for ubuntu2604',
    ),
    "debian12": (
        {
            "gpurig_cuda_version": "13.0",
            "gpurig_driver_branch": "570",
            "nvidia_driver_allow_eol_branch": True,
        },
        "gpurig_cuda_version 13.0 needs driver branch 580 or newer",
    ),
}


def test_preflight_refuses_what_the_os_does_not_get(host, distro, refused):
    extra_vars, expected = REFUSED[distro]
    site = Path(__file__).resolve().parents[3] / "site.yml"
    message = refused(host, site, extra_vars)
    assert expected in message


# DCGM (roles/dcgm, on by default): where compat.yml says NVIDIA publishes it (here Debian 12; not
# Ubuntu 20.04 or Debian 13), -core, -proprietary and the package of the driver's CUDA major at
# compat.yml's version, pinned and held while the stand-in offers a newer build, and the nvidia-dcgm
# host engine enabled and running; elsewhere nothing of DCGM.
DCGM_PIN = "/etc/apt/preferences.d/gpurig-dcgm"


@pytest.fixture
def dcgm(compat, distro, defaults):
    """{package: version} roles/dcgm must install, or {} where NVIDIA publishes no DCGM. The CUDA
    major is the driver's: that of the newest CUDA release the default branch ships with (R580:
    13.0, so datacenter-gpu-manager-4-cuda13, as NVIDIA's guide picks it from nvidia-smi)."""
    if not compat["distros"][distro]["dcgm"]:
        return {}
    branch = int(defaults.branch)
    release = [r for r, entry in compat["cuda"].items() if entry["ships_with"] <= branch][-1]
    entry = compat["cuda_major"][release.split(".")[0]]
    names = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary", entry["dcgm"]]
    return dict.fromkeys(names, entry["dcgm_version"])


def test_dcgm_installed_pinned_and_held_where_published(host, dcgm, distro, standin):
    installed = host.check_output("dpkg-query --show --showformat='${Package} ${Version}\\n'")
    found = {
        name: version
        for name, version in (line.split() for line in installed.splitlines())
        if name.startswith("datacenter-gpu-manager")
    }
    assert found == dcgm
    if not dcgm:
        assert not host.file(DCGM_PIN).exists
        return
    pin = host.file(DCGM_PIN).content_string
    assert f"Pin: version {next(iter(dcgm.values()))}\n" in pin
    assert f"Package: {' '.join(dcgm)}\n" in pin
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    assert {name: selections.get(name) for name in dcgm} == dict.fromkeys(dcgm, "hold")
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert [name for name in dcgm if f'"{name}$"' not in blacklist] == []
    # The stand-in offers a newer build of each; a plain upgrade must leave them where they are.
    for name, version in dcgm.items():
        assert standin.newest(name, distro) != version, f"the scenario needs a newer {name}"
    plan = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    moved = [line.split()[1] for line in plan.splitlines() if line.startswith("Inst ")]
    assert [name for name in moved if name in dcgm] == []


def test_dcgm_host_engine_enabled_and_running(host, dcgm):
    service = host.service("nvidia-dcgm")
    if not dcgm:
        assert not service.is_running
        return
    assert service.is_enabled
    assert service.is_running

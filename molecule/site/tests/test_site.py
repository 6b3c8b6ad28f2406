"""The NVIDIA stack site.yml leaves on a host: every component at its version, locked together."""

from __future__ import annotations

import re

import pytest

# Defaults of the roles (no variables set in this scenario): the version each component must have.
# The stand-in repo also offers newer builds of the same branch/minor (e.g. libnccl2 2.19.3-1),
# which the pins and holds must keep out.
COMMON = {
    "cuda-drivers-535": "535.183.01",
    "cuda-toolkit-12-2": "12.2.2-1",
    "libcudnn8": "8.9.7.29-1+cuda12.2",
    "libcudnn8-dev": "8.9.7.29-1+cuda12.2",
    "libnccl2": "2.18.5-1+cuda12.2",
    "libnccl-dev": "2.18.5-1+cuda12.2",
}
# The driver package: branch-named in NVIDIA's Ubuntu repos, Debian's name in its Debian repo.
DRIVER = {"debian12-site": "nvidia-driver", "ubuntu2004-site": "nvidia-driver-535"}
STACK = {host: {**COMMON, driver: "535.183.01"} for host, driver in DRIVER.items()}


@pytest.fixture
def stack(host):
    return STACK[host.backend.get_hostname()]


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


def test_nothing_in_the_stack_would_be_upgraded(host, stack):
    # libnccl2 2.19.3-1+cuda12.2 is in the repo and newer than the pinned 2.18.5-1: a plain
    # upgrade must leave every component where it is.
    assert "2.19.3-1+cuda12.2" in host.check_output("apt-cache madison libnccl2")
    plan = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    moved = [line for line in plan.splitlines() if line.startswith("Inst ")]
    assert [line for line in moved if line.split()[1] in stack] == []


def test_one_driver_branch_only(host):
    # cuda-toolkit-12-2 must not have pulled the unversioned cuda-drivers, which follows the
    # newest branch, and no package of another branch may be installed.
    names = host.check_output("dpkg-query --show --showformat='${Package} ${Version}\\n'")
    packages = dict(line.split() for line in names.splitlines())
    assert "cuda-drivers" not in packages
    assert [
        name
        for name in packages
        if re.match(r"(nvidia-driver|cuda-drivers)-(?!535(-open)?$)", name)
    ] == []
    libcuda = packages.get("libcuda1") or packages.get("libnvidia-compute-535")
    assert libcuda is not None and libcuda.startswith("535.")


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
    assert not host.package("nvidia-fabricmanager-535").is_installed


def test_nouveau_blacklisted(host):
    assert "blacklist nouveau" in host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string


def test_cuda_environment(host):
    assert host.check_output("readlink -f /usr/local/cuda") == "/usr/local/cuda-12.2"
    assert host.check_output("bash -lc 'echo $PATH'").split(":")[0] == "/usr/local/cuda/bin"
    assert "/usr/local/cuda/lib64" in host.check_output("bash -lc 'echo $LD_LIBRARY_PATH'")
    assert "/usr/local/cuda/lib64:" in host.check_output("ldconfig -v 2>/dev/null | grep -v '^\\s'")

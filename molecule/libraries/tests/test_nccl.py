"""State the nccl role leaves, and what it refuses."""

from __future__ import annotations

import shlex

import pytest

PACKAGES = ["libnccl2", "libnccl-dev"]
# The build ubuntu2004 asked for (molecule.yml host_vars); debian12 asked for CUDA 12.2 only and
# takes compat.yml's NCCL for it.
ASKED = {"ubuntu2004": "2.21.5-1+cuda12.4"}


@pytest.fixture
def build(distro, compat):
    return ASKED.get(distro, f"{compat['cuda']['12.2']['nccl']}+cuda12.2")


def test_build_for_the_cuda_minor_installed(host, build):
    for package in PACKAGES:
        assert host.package(package).version == build


def test_pinned_while_other_builds_exist(host, build):
    for package in PACKAGES:
        offered = host.check_output(f"apt-cache madison {package}")
        assert len(offered.splitlines()) > 1, "the scenario needs other builds in the repo"
        policy = host.check_output(f"LC_ALL=C apt-cache policy {package}")
        assert f"Candidate: {build}" in policy
        assert f"{build} 1001" in policy
    upgrade = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    assert "Inst libnccl" not in upgrade


def test_held_and_kept_out_of_unattended_upgrades(host):
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for package in PACKAGES:
        assert selections[package] == "hold"
        assert f'"{package}$"' in blacklist


@pytest.mark.parametrize(
    "extra_vars,missing",
    [
        # 2.21.5-1 is built for CUDA 12.4 only, not for the host's CUDA 12.2.
        ({"nccl_version": "2.21.5-1"}, "libnccl2=2.21.5-1+cuda12.2"),
        ({"nccl_version": "2.18.5-1", "gpurig_cuda_version": "12.4"}, "libnccl2=2.18.5-1+cuda12.4"),
    ],
    ids=["release not built for the host's CUDA", "12.4 build of 2.18.5 missing"],
)
def test_refuses_a_build_the_repo_does_not_have(distro, extra_vars, missing, refused_alone):
    if distro != "debian12":
        pytest.skip("run once, on debian12")
    message = refused_alone("nccl", extra_vars)
    assert missing in message
    assert "nccl_version" in message
    assert "gpurig_cuda_version" in message


def test_fails_when_nccl_h_states_another_version(host, distro, alone, failed_alone):
    if distro != "debian12":
        pytest.skip("run once, on debian12")
    # A hand-built NCCL installed into /usr (make install) overwrites the packaged header: the
    # headers code is compiled against no longer match the pinned library, and the role must say so.
    saved = host.file("/usr/include/nccl.h").content_string
    host.check_output(
        "sed -i -e 's/^#define NCCL_MINOR .*/#define NCCL_MINOR 99/' /usr/include/nccl.h"
    )
    try:
        message = failed_alone("nccl")
        assert "/usr/include/nccl.h states NCCL 2.99." in message
        assert "nccl_version" in message
    finally:
        host.check_output(f"printf '%s' {shlex.quote(saved)} > /usr/include/nccl.h")
    again = alone("nccl")
    assert again.rc == 0, again.failures

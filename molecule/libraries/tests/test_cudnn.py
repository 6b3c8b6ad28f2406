"""State the cudnn role leaves from the repo route, and what it refuses."""

from __future__ import annotations

import pytest

# What each platform asked for (molecule.yml host_vars), the packages that carry it, and a newer
# build the stand-in repo also offers.
EXPECTED = {
    "debian12": {
        "packages": ["libcudnn8", "libcudnn8-dev"],
        "version": "8.9.6.50-1+cuda12.2",
        "newer": "8.9.7.29-1+cuda12.2",
        "other_major_dev": "libcudnn9-dev-cuda-12",
    },
    "ubuntu2004": {
        "packages": ["cudnn9-cuda-12", "libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"],
        "version": "9.1.0.70-1",
        "newer": "9.5.1.17-1",
        "other_major_dev": None,
    },
}


@pytest.fixture
def want(distro):
    return EXPECTED[distro]


def test_pinned_packages_installed(host, want):
    for package in want["packages"]:
        assert host.package(package).is_installed
        assert host.package(package).version == want["version"]


def test_pinned_older_build_stays_while_newer_exists(host, want):
    for package in want["packages"]:
        assert want["newer"] in host.check_output(f"apt-cache madison {package}")
        policy = host.check_output(f"LC_ALL=C apt-cache policy {package}")
        assert f"Candidate: {want['version']}" in policy
        assert f"{want['version']} 1001" in policy
    upgrade = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    for package in want["packages"]:
        assert f"Inst {package} " not in upgrade


def test_packages_held_and_kept_out_of_unattended_upgrades(host, want):
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    for package in want["packages"]:
        assert selections[package] == "hold"
        assert f'"{package}$"' in blacklist


def test_refuses_a_build_the_repo_does_not_have(want, refused_alone):
    if want["other_major_dev"] is None:
        pytest.skip("run once, on debian12")
    # The stand-in has cuDNN 8.9 builds for CUDA 12.2 only: asking for a 12.4 build must stop the
    # role before it pins or installs anything.
    message = refused_alone("cudnn", {"cudnn_version": "8.9.7.29", "gpurig_cuda_version": "12.4"})
    assert "libcudnn8=8.9.7.29-1+cuda12.4" in message
    assert "cudnn_version" in message
    assert "gpurig_cuda_version" in message


def test_fails_when_the_header_states_another_version(host, want, alone, failed_alone):
    if want["other_major_dev"] is None:
        pytest.skip("run once, on debian12")
    # Another major's -dev package takes over /usr/include/cudnn_version.h (update-alternatives,
    # higher priority): compilers no longer see the requested cuDNN, and the role must say so.
    other = want["other_major_dev"]
    host.check_output(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {other}")
    try:
        message = failed_alone("cudnn")
        assert "/usr/include/cudnn_version.h states cuDNN 9." in message
        assert "cudnn_version is 8.9.6.50" in message
    finally:
        host.check_output(
            f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {other} libcudnn9-cuda-12"
        )
    # With the other major gone the role converges again.
    again = alone("cudnn")
    assert again.rc == 0, again.failures

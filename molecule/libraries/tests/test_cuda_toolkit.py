"""State the cuda_toolkit role leaves: pinned toolkit, no driver, links, environment, holds."""

from __future__ import annotations

import pytest

# What each platform asked for (molecule.yml host_vars) and the version apt must have installed.
EXPECTED = {
    "debian12": {"minor": "2", "version": "12.2.1-1", "alternatives": False},
    "ubuntu2004": {"minor": "4", "version": "12.4.1-1", "alternatives": True},
}


@pytest.fixture
def want(distro):
    return EXPECTED[distro]


def test_pinned_toolkit_installed(host, want):
    package = host.package(f"cuda-toolkit-12-{want['minor']}")
    assert package.is_installed
    assert package.version == want["version"]


def test_pinned_older_version_stays_while_newer_exists(host, want):
    if want["version"] != "12.2.1-1":
        pytest.skip("only debian12 pins an older build")
    offered = host.check_output("apt-cache madison cuda-toolkit-12-2")
    assert "12.2.2-1" in offered, "the scenario needs a newer build in the repo"
    policy = host.check_output("LC_ALL=C apt-cache policy cuda-toolkit-12-2")
    assert "Candidate: 12.2.1-1" in policy
    assert "12.2.1-1 1001" in policy
    upgrade = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    assert "Inst cuda-toolkit-12-2" not in upgrade


def test_no_driver_installed(host):
    installed = host.check_output(
        "dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}\\n'"
    ).splitlines()
    drivers = [
        line
        for line in installed
        if line.split()[0].startswith(
            ("nvidia-driver", "cuda-drivers", "libnvidia-compute-", "libcuda")
        )
        and line.split()[1][1] == "i"
    ]
    assert drivers == []


def test_toolkit_packages_held(host, want):
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    toolkit = [
        name
        for name in selections
        if name.endswith(f"-12-{want['minor']}")
        or name.endswith(f"-12-{want['minor']}-config-common")
    ]
    assert f"cuda-toolkit-12-{want['minor']}" in toolkit
    if want["alternatives"]:
        assert f"cuda-toolkit-12-{want['minor']}-config-common" in toolkit
    assert {name: selections[name] for name in toolkit} == dict.fromkeys(toolkit, "hold")


def test_toolkit_kept_out_of_unattended_upgrades(host, want):
    # What apt (and so unattended-upgrades) reads, merged from every configuration snippet.
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert f'"cuda-toolkit-12-{want["minor"]}$"' in blacklist


def test_cuda_links_point_at_toolkit(host, want):
    home = f"/usr/local/cuda-12.{want['minor']}"
    for link in ("/usr/local/cuda", "/usr/local/cuda-12"):
        assert host.file(link).is_symlink
        assert host.check_output(f"readlink -f {link}") == home


def test_alternatives_selected_manually(host, want):
    if not want["alternatives"]:
        pytest.skip("the 12.2 packages register no alternatives")
    query = host.check_output("LC_ALL=C update-alternatives --query cuda").splitlines()
    assert "Status: manual" in query
    assert "Value: /usr/local/cuda-12.4" in query
    # prepare registered a second toolkit at a higher priority: auto mode would have picked it
    assert "Best: /usr/local/cuda-12.9" in query


def test_login_shell_environment(host):
    path = host.check_output("bash -lc 'echo $PATH'").split(":")
    assert path[0] == "/usr/local/cuda/bin"
    ld_path = host.check_output("bash -lc 'echo $LD_LIBRARY_PATH'").split(":")
    assert "/usr/local/cuda/lib64" in ld_path
    # Sourcing the profile again (nested login shells) adds nothing twice.
    again = host.check_output("bash -lc '. /etc/profile.d/gpurig-cuda.sh; echo $PATH'")
    assert again.split(":").count("/usr/local/cuda/bin") == 1


def test_dynamic_linker_searches_lib64(host):
    scanned = host.check_output("ldconfig -v 2>/dev/null | grep -v '^\\s'")
    assert "/usr/local/cuda/lib64:" in scanned


# The stand-in has a 12.2.0-1 build that depends on cuda-drivers (a driver metapackage, as
# `cuda-12-x` does in NVIDIA's repo). The role must read that dependency and stop before apt
# installs anything, on both distros (on Debian apt could not even plan it with the driver pinned).
def test_refuses_toolkit_build_that_pulls_a_driver(refused_alone):
    message = refused_alone(
        "cuda_toolkit",
        {
            "gpurig_cuda_version": "12.2",
            "cuda_toolkit_package_version": "12.2.0-1",
            "gpurig_driver_branch": "535",
        },
    )
    assert "Refusing to install cuda-toolkit-12-2=12.2.0-1" in message
    assert "it depends on cuda-drivers (>= 535.104.05)" in message
    assert "cuda_toolkit_package_version" in message

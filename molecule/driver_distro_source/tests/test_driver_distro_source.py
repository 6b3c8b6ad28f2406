"""nvidia_driver_source: distro, with DKMS modules and with Canonical's signed modules."""

from pathlib import Path

import driver_state as ds  # molecule/driver_state.py, beside molecule/conftest.py

PROJECT_DIR = Path(__file__).resolve().parents[3]

BRANCH = "535"
VERSION = f"{BRANCH}.183.01"
SIGNED_ONLY = ["nvidia-headless-no-dkms-535-server", "nvidia-utils-535-server"]
DKMS_ONLY = ["nvidia-headless-535-server", "nvidia-dkms-535-server"]


def signed(host):
    return host.backend.get_hostname().endswith("signed")


def test_server_packages_installed(host):
    status = ds.dpkg_status(host)
    expected = [name.format(b=BRANCH) for name in ds.DRIVER_PACKAGES[("ubuntu", "distro")]]
    if signed(host):
        expected = [name for name in expected if name not in DKMS_ONLY]
        assert all(name not in status or status[name][1][1] != "i" for name in DKMS_ONLY)
        assert status["linux-modules-nvidia-535-server-generic"][1][1] == "i"
    for name in expected + SIGNED_ONLY:
        assert status[name][1][1] == "i", name
        assert ds.upstream(status[name][0]) == VERSION


def test_nothing_from_nvidias_repo(host):
    # The distro source needs no NVIDIA repository and installs none of its packages.
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    status = ds.dpkg_status(host)
    assert "cuda-drivers-535" not in status
    assert "nvidia-driver-535" not in status


def test_held_and_blacklisted(host):
    driver = ds.assert_driver_held(host, VERSION)
    if signed(host):
        held = ds.selections(host)
        assert held["linux-modules-nvidia-535-server-generic"] == "hold"
    assert "libnvidia-compute-535-server" in driver


def test_persistenced_enabled_and_running(host):
    ds.assert_persistenced_running(host)


def test_fabricmanager_skipped_without_nvswitch(host):
    ds.assert_fabricmanager_absent(host)


def test_pending_reboot_recorded(host):
    ds.assert_reboot_pending(host, "distro")


def test_refuses_a_branch_the_archive_moved_to_another(host, refused):
    # The stand-in archive publishes the 545-server packages only as transitional packages of
    # 550 (see tests/standin/packages.yml). compat.yml's list of Canonical's branches would refuse
    # 545 in validation; a stale list that still names it (nvidia_driver_distro_branches) must not
    # let the move through: it stops with the reason before the holds are released or anything is
    # installed.
    message = refused(
        host,
        PROJECT_DIR / "playbooks" / "upgrade-driver.yml",
        {"gpurig_driver_branch": "545", "nvidia_driver_distro_branches": ["535", "545"]},
    )
    assert "offered only at 550.127.05" in message
    assert "driver branch 545 (gpurig_driver_branch)" in message
    assert "moved this branch-named package to another branch" in message
    ds.assert_driver_held(host, VERSION)

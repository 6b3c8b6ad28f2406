"""nvidia_driver with defaults: the newest driver of compat.yml's default branch from the
stand-in of NVIDIA's repo."""

import driver_state as ds
import pytest


@pytest.fixture
def newest(distro, defaults, standin):
    """The newest upstream version of the default branch the stand-in offers (580.105.08)."""
    return standin.newest(f"cuda-drivers-{defaults.branch}", distro).split("-", 1)[0]


def test_newest_driver_of_branch_installed(host, newest, distro, defaults, compat):
    status = ds.assert_driver_installed(host, "nvidia_repo", newest)
    # Other branches exist in the repo (on Debian under the same names) but are not used.
    others = tuple(f"{b}." for b in compat["distros"][distro]["branches"] if b != defaults.branch)
    assert not any(v.startswith(others) for v, a in status.values() if a[1] == "i")


def test_resolved_version_pinned_for_apt(host, newest):
    pin = host.file("/etc/apt/preferences.d/gpurig-nvidia-driver")
    assert pin.mode == 0o644
    assert f"Pin: version {newest}-*" in pin.content_string.splitlines()


def test_driver_held_and_blacklisted(host, newest, defaults):
    driver = ds.assert_driver_held(host, newest)
    assert f"cuda-drivers-{defaults.branch}" in driver


def test_persistenced_enabled_and_running(host):
    ds.assert_persistenced_running(host)


def test_fabricmanager_skipped_without_nvswitch(host):
    ds.assert_fabricmanager_absent(host)


def test_pending_reboot_recorded(host):
    ds.assert_reboot_pending(host, "nvidia_repo")

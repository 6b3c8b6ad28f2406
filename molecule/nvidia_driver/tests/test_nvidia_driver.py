"""nvidia_driver with defaults: the newest 580 driver from the stand-in of NVIDIA's repo."""

import driver_state as ds

NEWEST = "580.105.08"


def test_newest_driver_of_branch_installed(host):
    status = ds.assert_driver_installed(host, "nvidia_repo", NEWEST)
    # Other branches exist in the repo (on Debian under the same names) but are not used.
    assert not any(v.startswith(("535.", "550.")) for v, a in status.values() if a[1] == "i")


def test_resolved_version_pinned_for_apt(host):
    pin = host.file("/etc/apt/preferences.d/gpustack-nvidia-driver")
    assert pin.mode == 0o644
    assert f"Pin: version {NEWEST}-*" in pin.content_string.splitlines()


def test_driver_held_and_blacklisted(host):
    driver = ds.assert_driver_held(host, NEWEST)
    assert "cuda-drivers-580" in driver


def test_persistenced_enabled_and_running(host):
    ds.assert_persistenced_running(host)


def test_fabricmanager_skipped_without_nvswitch(host):
    ds.assert_fabricmanager_absent(host)


def test_pending_reboot_recorded(host):
    ds.assert_reboot_pending(host, "nvidia_repo")

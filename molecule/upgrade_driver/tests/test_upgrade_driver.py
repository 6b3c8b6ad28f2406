"""After converging on 535.161.08 and running playbooks/upgrade-driver.yml for 535.183.01."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nvidia_driver" / "tests"))
import driver_state as ds

OLD = "535.161.08"
NEW = "535.183.01"


def test_new_version_installed(host):
    status = ds.assert_driver_installed(host, "nvidia_repo", NEW)
    assert not [name for name, (version, abbrev) in status.items() if version.startswith(f"{OLD}-")]


def test_pin_moved_to_new_version(host):
    pin = host.file("/etc/apt/preferences.d/gpustack-nvidia-driver").content_string.splitlines()
    assert f"Pin: version {NEW}-*" in pin


def test_held_again_and_blacklisted(host):
    driver = ds.assert_driver_held(host, NEW)
    assert {"cuda-drivers-535", "nvidia-fabricmanager-535"} <= set(driver)


def test_fabricmanager_moved_with_driver(host):
    ds.assert_fabricmanager_running(host, NEW)


def test_persistenced_enabled_and_running(host):
    ds.assert_persistenced_running(host)


def test_pending_reboot_recorded(host):
    ds.assert_reboot_pending(host, "nvidia_repo")

"""After converging on 535.161.08 and running playbooks/upgrade-driver.yml for 535.183.01: the
second verify pass, after side_effect.yml (conftest.py)."""

import driver_state as ds  # molecule/driver_state.py, beside molecule/conftest.py
import pytest

OLD = "535.161.08"
NEW = "535.183.01"


@pytest.fixture(autouse=True)
def after_the_upgrade(upgraded):
    if not upgraded:
        pytest.skip("checked in the verify pass after side_effect.yml's upgrade")


def test_new_version_installed(host):
    status = ds.assert_driver_installed(host, "nvidia_repo", NEW)
    assert not [name for name, (version, abbrev) in status.items() if version.startswith(f"{OLD}-")]


def test_pin_moved_to_new_version(host):
    pin = host.file("/etc/apt/preferences.d/gpurig-nvidia-driver").content_string.splitlines()
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

"""nvidia_driver with nvidia_driver_version 535.161.08 while 535.183.01 exists in the repo: the
first verify pass, before side_effect.yml upgrades (conftest.py)."""

import driver_state as ds  # molecule/driver_state.py, beside molecule/conftest.py
import pytest

PINNED = "535.161.08"
NEWER = "535.183.01"


@pytest.fixture(autouse=True)
def before_the_upgrade(upgraded):
    if upgraded:
        pytest.skip("the pinned driver's checks ran in the verify pass before side_effect.yml")


def test_newer_version_is_offered(host):
    # The scenario means something only if the repo offers the newer version.
    madison = host.run_expect([0], "apt-cache madison cuda-drivers-535").stdout
    assert f"{NEWER}-" in madison


def test_pinned_older_version_installed(host):
    ds.assert_driver_installed(host, "nvidia_repo", PINNED)


def test_version_pinned_for_apt(host):
    pin = host.file("/etc/apt/preferences.d/gpurig-nvidia-driver")
    assert pin.mode == 0o644
    assert f"Pin: version {PINNED}-*" in pin.content_string.splitlines()
    # apt's view: the candidate is the pinned version, not the newest.
    policy = host.run_expect([0], "apt-cache policy cuda-drivers-535").stdout
    candidate = next(line.split()[1] for line in policy.splitlines() if "Candidate:" in line)
    assert candidate.startswith(f"{PINNED}-")


def test_pinned_driver_held_and_blacklisted(host):
    driver = ds.assert_driver_held(host, PINNED)
    assert "nvidia-fabricmanager-535" in driver


def test_fabricmanager_matches_pinned_driver(host):
    ds.assert_fabricmanager_running(host, PINNED)


def test_persistenced_enabled_and_running(host):
    ds.assert_persistenced_running(host)

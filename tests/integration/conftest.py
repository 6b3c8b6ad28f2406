"""Fixtures shared by the integration modules (helpers live in integration_support.py)."""

from __future__ import annotations

import pytest
from integration_support import netns, require_netns_hosts, unavailable

from bench.machine import horovod_status, tensorflow_env


@pytest.fixture(scope="module")
def horovod() -> None:
    """Horovod built into this environment (CI builds it; elsewhere the test skips)."""
    status = horovod_status()
    if not status.available:
        unavailable(f"Horovod is not installed in this environment: {status.reason}")


@pytest.fixture(scope="module")
def tensorflow() -> None:
    """TensorFlow in this environment or beside it (scripts/test.sh installs tensorflow-cpu;
    elsewhere the test skips)."""
    if tensorflow_env()[1] is None:
        unavailable("TensorFlow is not installed in or beside this environment")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory):
    """Three namespace hosts with sshd; yields the state directory (keys, ssh_config)."""
    require_netns_hosts("network namespaces and sshd")
    state = tmp_path_factory.mktemp("netns") / "state"
    netns("down", state)
    up = netns("up", state, "3")
    try:
        assert up.returncode == 0, up.stderr
        yield state
    finally:
        netns("down", state)

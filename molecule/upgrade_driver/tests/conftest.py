"""Two verify passes over the same hosts (molecule.yml's test_sequence): one after converge and
idempotence, on the pinned older driver (test_pinned_older.py), and one after side_effect.yml's
upgrade (test_upgrade_driver.py). side_effect.yml's last task writes UPGRADED; each module runs
only in its own pass."""

import pytest

UPGRADED = "/var/lib/gpurig-molecule/upgraded"


@pytest.fixture
def upgraded(host) -> bool:
    """Whether side_effect.yml's upgrade has run on this host."""
    return host.file(UPGRADED).exists

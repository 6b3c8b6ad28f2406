"""Each library role run alone (../role_alone.yml) on this scenario's converged hosts, for the
tests that watch one role stop."""

from pathlib import Path

import pytest

ROLE_ALONE = Path(__file__).resolve().parents[1] / "role_alone.yml"


@pytest.fixture
def alone(host, playbook):
    """alone(role, extra_vars={}) -> the PlaybookRun of `role` run alone on this host."""
    name = host.backend.get_hostname()
    return lambda role, extra_vars=(): playbook(
        ROLE_ALONE, limit=name, extra_vars={"libraries_role": role, **dict(extra_vars)}
    )


@pytest.fixture
def refused_alone(host, refused):
    """refused_alone(role, extra_vars) -> the message of `role`, run alone on this host, stopping
    before any change there (molecule/conftest.py's refused())."""
    return lambda role, extra_vars: refused(
        host, ROLE_ALONE, {"libraries_role": role, **extra_vars}
    )


@pytest.fixture
def failed_alone(host, alone):
    """failed_alone(role) -> the message of `role`, run alone on this host, which must fail."""

    def run(role):
        result = alone(role)
        assert result.rc != 0, f"{role} alone did not fail"
        return result.failures[host.backend.get_hostname()]

    return run

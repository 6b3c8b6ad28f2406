"""nvidia_driver's Secure Boot stop: its checks run alone (../nvidia_driver_checks.yml, the
role's validate.yml, which site.yml's preflight runs before any change) on this scenario's
converged Debian 12 and Ubuntu 20.04 stand-in hosts."""

from pathlib import Path

import pytest

# Host patterns of molecule.yml's inventory groups (testinfra expands them through Ansible).
testinfra_hosts = ["debian12", "ubuntu2004_standin"]

CONVERGE = Path(__file__).resolve().parents[1] / "nvidia_driver_checks.yml"


@pytest.mark.parametrize(("state", "stops"), [(1, True), (0, False)])
def test_secure_boot_stops_unsigned_modules(host, refused, playbook, state, stops):
    # TEST FIXTURE in efivarfs' layout (Linux Documentation/filesystems/efivarfs.rst: 4 bytes of
    # attributes, then the variable's data; SecureBoot's data is one byte, 1 = enforced), standing
    # in for /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c, which a
    # container does not expose.
    efivar = "/run/gpurig-test-SecureBoot"
    host.run_expect([0], f"printf '\\007\\000\\000\\000\\00{state}' > {efivar}")
    extra = {"nvidia_driver_secure_boot_efivar": efivar}
    try:
        if stops:
            message = refused(host, CONVERGE, extra)
            assert "Secure Boot is enabled" in message and "Nothing was changed" in message
        else:  # the same file saying "not enforced" lets the role through
            run = playbook(CONVERGE, limit=host.backend.get_hostname(), extra_vars=extra)
            assert run.rc == 0, run.stdout[-3000:]
    finally:
        host.run(f"rm -f {efivar}")

"""State gpu_prereqs leaves on the host (containers: no GPU, no headers, no initramfs)."""

from pathlib import Path

import pytest


@pytest.mark.parametrize("name", ["build-essential", "dkms", "pkg-config"])
def test_build_tools_installed(host, name):
    assert host.package(name).is_installed


def test_dkms_usable(host):
    # DKMS itself runs: the driver's packages build their module through it.
    assert host.run_expect([0], "dkms status").rc == 0
    assert host.run_expect([0], "gcc --version").stdout.startswith("gcc")


def test_nouveau_blacklisted(host):
    conf = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert conf.is_file
    assert conf.user == "root"
    assert conf.mode == 0o644
    lines = [line.strip() for line in conf.content_string.splitlines() if not line.startswith("#")]
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines
    # modprobe reads the file as configuration: nouveau resolves to a blacklist entry.
    cfg = host.run_expect([0], "modprobe --showconfig").stdout
    assert "blacklist nouveau" in cfg.splitlines()


def test_headers_not_installed_when_disabled(host):
    # The base config sets gpu_prereqs_install_kernel_headers: false (containers).
    kernel = host.run_expect([0], "uname -r").stdout.strip()
    assert not host.package(f"linux-headers-{kernel}").is_installed


# The role's two stops, on this (converged) container, each before any change: the refused run
# leaves the host's snapshot exactly as it was (molecule/conftest.py's refused()).
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"


def test_stops_when_no_nvidia_gpu_is_present(host, refused):
    # The container's /sys/bus/pci/devices is the VM's: no device of vendor 0x10de.
    message = refused(host, CONVERGE, {"gpu_prereqs_require_gpu": True})
    assert "No NVIDIA GPU (PCI vendor 0x10de) was found" in message
    assert "Nothing was changed" in message


@pytest.mark.parametrize(("state", "stops"), [(1, True), (0, False)])
def test_secure_boot_stops_unsigned_modules(host, refused, playbook, state, stops):
    # TEST FIXTURE in efivarfs' layout (Linux Documentation/filesystems/efivarfs.rst: 4 bytes of
    # attributes, then the variable's data; SecureBoot's data is one byte, 1 = enforced), standing
    # in for /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c, which a
    # container does not expose.
    efivar = "/run/gpustack-test-SecureBoot"
    host.run_expect([0], f"printf '\\007\\000\\000\\000\\00{state}' > {efivar}")
    extra = {"gpu_prereqs_secure_boot_efivar": efivar}
    try:
        if stops:
            message = refused(host, CONVERGE, extra)
            assert "Secure Boot is enabled" in message and "Nothing was changed" in message
        else:  # the same file saying "not enforced" lets the role through
            run = playbook(CONVERGE, limit=host.backend.get_hostname(), extra_vars=extra)
            assert run.rc == 0, run.stdout[-3000:]
    finally:
        host.run(f"rm -f {efivar}")

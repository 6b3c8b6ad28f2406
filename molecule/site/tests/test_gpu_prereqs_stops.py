"""gpu_prereqs' stop, the role run alone (../gpu_prereqs.yml) on this scenario's converged
Debian 12 and Ubuntu 20.04 stand-in hosts (the two its own scenario had before it was folded into
site; the stop reads files, not the OS's packages)."""

from pathlib import Path

# Host patterns of molecule.yml's inventory groups (testinfra expands them through Ansible).
testinfra_hosts = ["debian12", "ubuntu2004_standin"]

# The role's stop, on this (converged) container, before any change: the refused run
# leaves the host's snapshot exactly as it was (molecule/conftest.py's refused()).
CONVERGE = Path(__file__).resolve().parents[1] / "gpu_prereqs.yml"


def test_stops_when_no_nvidia_gpu_is_present(host, refused):
    # The container's /sys/bus/pci/devices is the VM's: no device of vendor 0x10de.
    message = refused(host, CONVERGE, {"gpu_prereqs_require_gpu": True})
    assert "No NVIDIA GPU (PCI vendor 0x10de) was found" in message
    assert "Nothing was changed" in message

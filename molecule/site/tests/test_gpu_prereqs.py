"""State gpu_prereqs leaves on the host (containers: no GPU, no headers, no initramfs); its two
stops are in test_gpu_prereqs_stops.py."""

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

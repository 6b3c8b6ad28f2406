"""Checks of the driver state shared by the driver tests (site's test_nvidia_driver.py,
upgrade_driver, driver_distro_source). They read what dpkg, apt and systemd report."""

import re

# The packages each install path must leave installed, by distro family and source; {b} is the
# driver branch (the scenarios use the default 580 and the still-selectable 535).
DRIVER_PACKAGES = {
    ("debian", "nvidia_repo"): [
        "cuda-drivers-{b}",
        "nvidia-driver",
        "libcuda1",
        "nvidia-persistenced",
        "nvidia-kernel-dkms",
    ],
    ("ubuntu", "nvidia_repo"): [
        "cuda-drivers-{b}",
        "nvidia-driver-{b}",
        "nvidia-utils-{b}",
        "libnvidia-compute-{b}",
        "nvidia-compute-utils-{b}",
        "nvidia-dkms-{b}",
    ],
    ("ubuntu", "distro"): [
        "nvidia-headless-{b}-server",
        "nvidia-headless-no-dkms-{b}-server",
        "nvidia-utils-{b}-server",
        "libnvidia-compute-{b}-server",
        "nvidia-compute-utils-{b}-server",
        "nvidia-dkms-{b}-server",
    ],
}
USERSPACE = {
    ("debian", "nvidia_repo"): r"libcuda1",
    ("ubuntu", "nvidia_repo"): r"libnvidia-compute-[0-9]{3}",
    ("ubuntu", "distro"): r"libnvidia-compute-[0-9]{3}-server",
}
BLACKLIST_SNIPPET = "/etc/apt/apt.conf.d/51gpurig-nvidia-driver-blacklist"


def family(host):
    return "debian" if host.system_info.distribution == "debian" else "ubuntu"


# verify only reads: each host's package database is read once per test session.
_DPKG_CACHE = {}


def dpkg_status(host):
    """{package: (version, status abbreviation)} for every package dpkg knows."""
    key = host.backend.get_hostname()
    if key not in _DPKG_CACHE:
        _DPKG_CACHE[key] = _read_dpkg_status(host)
    return _DPKG_CACHE[key]


def _read_dpkg_status(host):
    out = host.run_expect(
        [0], "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'"
    ).stdout
    rows = (line.split(" ", 2) for line in out.splitlines())
    return {name: (version, abbrev) for name, version, abbrev in rows}


def selections(host):
    out = host.run_expect([0], "dpkg --get-selections").stdout
    return {
        re.sub(r":\w+$", "", name): state
        for name, state in (line.split() for line in out.splitlines())
    }


def upstream(version):
    return version.rsplit("-", 1)[0]


def assert_driver_installed(host, source, expected_upstream):
    status = dpkg_status(host)
    branch = expected_upstream.split(".")[0]
    for name in (n.format(b=branch) for n in DRIVER_PACKAGES[(family(host), source)]):
        assert name in status and status[name][1][1] == "i", f"{name} not installed"
        assert upstream(status[name][0]) == expected_upstream, f"{name} is {status[name][0]}"
    return status


def assert_driver_held(host, expected_upstream):
    """Every installed package at the driver's version is held, and apt would not move any."""
    status = dpkg_status(host)
    driver = sorted(
        n for n, (v, a) in status.items() if a[1] == "i" and upstream(v) == expected_upstream
    )
    assert driver, "no package at the driver's version"
    held = selections(host)
    assert {name: held.get(name) for name in driver} == dict.fromkeys(driver, "hold")
    # What unattended-upgrades reads: apt's merged configuration.
    blacklist = host.run_expect([0], "apt-config dump Unattended-Upgrade::Package-Blacklist").stdout
    entries = set(re.findall(r'Package-Blacklist:: "([^"]+)";', blacklist))
    assert {re.escape(name).replace("\\-", "-") + "$" for name in driver} <= entries
    assert host.file(BLACKLIST_SNIPPET).mode == 0o644
    # With holds in place a full upgrade moves nothing of the driver, though newer versions exist.
    simulated = host.run_expect([0], "apt-get -s -o Debug::NoLocking=1 dist-upgrade").stdout
    moved = [
        line
        for line in simulated.splitlines()
        if line.startswith("Inst ") and line.split()[1] in driver
    ]
    assert moved == []
    return driver


def assert_persistenced_running(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert service.is_running
    exec_start = host.run_expect(
        [0], "systemctl show -p ExecStart --value nvidia-persistenced"
    ).stdout
    assert "/usr/bin/nvidia-persistenced" in exec_start
    assert "--no-persistence-mode" not in exec_start
    assert (
        host.run_expect(
            [0], "systemctl show -p StopWhenUnneeded --value nvidia-persistenced"
        ).stdout.strip()
        == "no"
    )


def assert_fabricmanager_absent(host):
    status = dpkg_status(host)
    installed = [
        n for n, (_, a) in status.items() if n.startswith("nvidia-fabricmanager") and a[1] == "i"
    ]
    assert installed == []
    assert not host.service("nvidia-fabricmanager").is_running


def assert_fabricmanager_running(host, expected_upstream):
    status = dpkg_status(host)
    version, abbrev = status[f"nvidia-fabricmanager-{expected_upstream.split('.')[0]}"]
    assert abbrev[1] == "i"
    assert upstream(version) == expected_upstream
    service = host.service("nvidia-fabricmanager")
    assert service.is_enabled
    assert service.is_running


def assert_reboot_pending(host, source):
    # No kernel module in a container: the role records the pending reboot instead of rebooting.
    assert not host.file("/proc/driver/nvidia/version").exists
    assert host.file("/var/run/reboot-required").exists
    pending = host.file("/var/run/reboot-required.pkgs").content_string.split()
    assert any(re.fullmatch(USERSPACE[(family(host), source)], name) for name in pending), pending

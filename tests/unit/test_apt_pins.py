"""The apt pins the roles write select packages by name or glob(7), never by /regex/; and the
roles refresh apt's lists in one place (the last test).

apt_preferences(5) lets a Package field hold names, globs and /regexes/, each standing for the
names it matches; but apt tests a regex against every package name whenever it opens its cache.
The driver's former pin, /^(cuda-drivers|nvidia-|libnvidia-|libcuda|...)/, made `apt-cache policy`
take 2.0 s instead of 0.08 s on a Debian 12 host with Debian's archive (apt 2.6, measured
2026-11-25), on every apt command and apt-module task the host ever runs.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
PIN_CALL = re.compile(r"^\s*apt_source_pin:\s*(.*)$", re.M)


def test_no_role_pins_packages_by_regex():
    calls = {
        f"{path.relative_to(ROLES)}: {m.group(1)}"
        for path in ROLES.glob("*/tasks/*.yml")
        for m in PIN_CALL.finditer(path.read_text())
    }
    assert calls, "no apt_source pin calls found: the pattern no longer matches the roles"
    # Package selectors come from lists of names (dict(... | product([version]))) or are the
    # driver's globs below; none is written inline as a /regex/.
    assert [c for c in calls if re.search(r"[{,]\s*['\"]?/", c)] == []


def test_driver_pin_globs_cover_the_driver_packages_and_nothing_else():
    names = yaml.safe_load((ROLES / "nvidia_driver" / "vars" / "main.yml").read_text())[
        "nvidia_driver_pin_names"
    ]
    assert not [n for n in names if n.startswith("/") or n.endswith("/")]

    def pinned(package: str) -> bool:
        return any(fnmatch.fnmatchcase(package, glob) for glob in names)

    # Ubuntu's branch-named and Debian's unversioned driver packages (molecule/driver_state.py),
    # Canonical's -server packages and the GSP firmware.
    driver = [
        "cuda-drivers-580",
        "nvidia-driver",
        "nvidia-driver-580",
        "libcuda1",
        "libnvidia-compute-580",
        "nvidia-kernel-dkms",
        "nvidia-headless-535-server",
        "xserver-xorg-video-nvidia",
        "firmware-nvidia-gsp",
    ]
    assert [p for p in driver if not pinned(p)] == []
    others = ["cuda-toolkit-13-0", "libnccl2", "cudnn9-cuda-13", "datacenter-gpu-manager-4-core"]
    assert [p for p in others if pinned(p)] == []


# Roles refresh apt's lists only through apt_source's `lists` entry point, which also refreshes
# lists that are missing however new their directory is. ansible.builtin.apt's cache_valid_time
# reads only the time (the mtime of /var/lib/apt/lists when no update-success-stamp exists), so a
# host imaged within the hour with its lists removed got "No package matching 'xz-utils' is
# available" from the cudnn archive install (CI's fresh test images, 2026-11-25). gpu_prereqs
# keeps its own refresh: check mode needs the lists there (apt cannot say what it would install
# without them), and apt_source's refresh does not run in check mode.
OWN_REFRESH = {"apt_source", "gpu_prereqs"}
REFRESH = re.compile(r"^\s*(update_cache|cache_valid_time):", re.M)


def test_roles_refresh_apt_lists_only_through_apt_source():
    refreshing = {
        str(path.relative_to(ROLES))
        for path in ROLES.glob("*/tasks/*.yml")
        if REFRESH.search(path.read_text())
    }
    assert {p.split("/")[0] for p in refreshing} == OWN_REFRESH, refreshing

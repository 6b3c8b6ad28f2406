"""The stand-ins of Docker's and NVIDIA's toolkit repos carry what container_runtime installs.

The role's per-OS default releases (roles/container_runtime/vars/main.yml, by codename) and its
toolkit default must be in the stand-in's manifest for the suite each OS uses, and the Docker suffix
the role derives from a host's facts must be the one the stand-in builds (Docker's
"~debian.12~bookworm" form), or molecule/container_runtime would fail for a reason that is not the
role's. YAML reading, and the role's suffix expression rendered with Jinja2 as Ansible would.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/container_runtime"
MANIFEST = yaml.safe_load((ROOT / "tests/standin/packages.yml").read_text())
ROLE_VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())

_spec = importlib.util.spec_from_file_location("standin_repo", ROOT / "tests/infra/standin_repo.py")
standin_repo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standin_repo)

# The facts Ansible gathers on each OS the role lists (distribution, distribution_version,
# distribution_major_version, distribution_release), as /etc/os-release gives them.
FACTS = {
    "focal": ("Ubuntu", "20.04", "20"),
    "jammy": ("Ubuntu", "22.04", "22"),
    "noble": ("Ubuntu", "24.04", "24"),
    "bookworm": ("Debian", "12.12", "12"),
    "trixie": ("Debian", "13.2", "13"),
}
CODENAMES = list(ROLE_VARS["container_runtime_os_engines"])


def os_vars(codename: str) -> dict:
    """The role's Docker distro, codename and suffix for a host of that codename."""
    distribution, version, major = FACTS[codename]
    facts = {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": major,
        "distribution_release": codename,
    }
    env = jinja2.Environment()
    data = {"ansible_facts": facts}
    for key in ("distro", "codename", "suffix"):
        name = f"container_runtime_os_docker_{key}"
        data[name] = env.from_string(ROLE_VARS[name]).render(**data)
    return data


def test_every_listed_os_has_facts_here():
    assert sorted(CODENAMES) == sorted(FACTS)


def offered(suite: str) -> dict[str, set[str]]:
    suffix = standin_repo.DOCKER_SUITES[suite]
    found: dict[str, set[str]] = {}
    for pkg in MANIFEST["docker"]:
        if suite in pkg.get("suites", standin_repo.DOCKER_SUITES):
            for version in pkg["versions"]:
                found.setdefault(pkg["name"], set()).add(str(version).format(suffix=suffix))
    return found


@pytest.mark.parametrize("codename", CODENAMES)
def test_each_os_suite_is_built_with_the_roles_suffix(codename):
    data = os_vars(codename)
    distro, codename = (data[f"container_runtime_os_docker_{k}"] for k in ("distro", "codename"))
    suite = f"{distro}/{codename}"
    assert data["container_runtime_os_docker_suffix"] == "~" + standin_repo.DOCKER_SUITES[suite]


@pytest.mark.parametrize("codename", CODENAMES)
def test_stand_in_offers_the_default_releases_of_each_os(codename):
    data = os_vars(codename)
    codename = data["container_runtime_os_docker_codename"]
    releases = ROLE_VARS["container_runtime_docker_releases"]
    release = releases.get(codename, releases["current"])
    suffix = data["container_runtime_os_docker_suffix"]
    have = offered(f"{data['container_runtime_os_docker_distro']}/{codename}")
    containerd_suffix = suffix if release["containerd_os_suffix"] else ""
    wanted = {
        "docker-ce": f"5:{release['docker']}-1{suffix}",
        "docker-ce-cli": f"5:{release['docker']}-1{suffix}",
        "containerd.io": release["containerd"] + containerd_suffix,
        "docker-buildx-plugin": f"{release['buildx']}-1{suffix}",
        "docker-compose-plugin": f"{release['compose']}-1{suffix}",
    }
    assert {p: v for p, v in wanted.items() if v not in have.get(p, set())} == {}


def test_stand_in_offers_the_default_toolkit_and_a_newer_one():
    default = DEFAULTS["container_runtime_toolkit_version"]
    packages = {
        pkg["name"]: set(map(str, pkg["versions"])) for pkg in MANIFEST["nvidia_container_toolkit"]
    }
    assert set(packages) == set(ROLE_VARS["container_runtime_toolkit_packages"])
    assert all(default in versions for versions in packages.values())
    assert all(len(versions) > 1 for versions in packages.values())

"""The stand-ins of Docker's and NVIDIA's toolkit repos carry what container_runtime installs.

The role's per-OS default releases (roles/container_runtime/vars/main.yml, by codename) and its
toolkit default must be in the stand-in's manifest for the suite each OS uses, and the role's
per-OS Docker suffix must be the one the stand-in builds (Docker's "~debian.12~bookworm" form),
or molecule/container_runtime would fail for a reason that is not the role's. Plain YAML reading.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

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

OS_FILES = sorted((ROLE / "vars").glob("*-*.yml"))


def os_vars(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def offered(suite: str) -> dict[str, set[str]]:
    suffix = standin_repo.DOCKER_SUITES[suite]
    found: dict[str, set[str]] = {}
    for pkg in MANIFEST["docker"]:
        if suite in pkg.get("suites", standin_repo.DOCKER_SUITES):
            for version in pkg["versions"]:
                found.setdefault(pkg["name"], set()).add(str(version).format(suffix=suffix))
    return found


@pytest.mark.parametrize("path", OS_FILES, ids=lambda p: p.stem)
def test_each_os_suite_is_built_with_the_roles_suffix(path):
    data = os_vars(path)
    distro, codename = (data[f"container_runtime_os_docker_{k}"] for k in ("distro", "codename"))
    suite = f"{distro}/{codename}"
    assert data["container_runtime_os_docker_suffix"] == "~" + standin_repo.DOCKER_SUITES[suite]


@pytest.mark.parametrize("path", OS_FILES, ids=lambda p: p.stem)
def test_stand_in_offers_the_default_releases_of_each_os(path):
    data = os_vars(path)
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

"""State container_runtime leaves: sources, keys, pins, holds, daemon.json, engine restarts.

Debian 12 and the Ubuntu 20.04 stand-in take Docker Engine from the stand-in of Docker's
repository (its packages are labelled fixtures; docker.service runs a fixture process that only
stays alive), Debian 13 the distribution's real docker.io, whose dockerd really runs in the
container. Nothing here asserts on what a fixture prints: only on what the role made and what
systemd and the real engine report.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from apt_sources import deb822  # molecule/apt_sources.py, beside molecule/conftest.py

PROJECT = Path(__file__).resolve().parents[3]
SITE = PROJECT / "site.yml"
ROLE = PROJECT / "roles/container_runtime"
# The role's defaults: Docker's releases by codename (vars/main.yml) and the toolkit's version.
RELEASES = yaml.safe_load((ROLE / "vars/main.yml").read_text())["container_runtime_docker_releases"]
TOOLKIT_VERSION = yaml.safe_load((ROLE / "defaults/main.yml").read_text())[
    "container_runtime_toolkit_version"
]
INSTANCES = [
    "debian12-container_runtime",
    "ubuntu2004-container_runtime",
    "debian13-container_runtime",
]
DOCKER_SOURCE = "/etc/apt/sources.list.d/docker.sources"
DOCKER_KEYRING = "/etc/apt/keyrings/docker.asc"
TOOLKIT_SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
TOOLKIT = {
    name: TOOLKIT_VERSION
    for name in (
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    )
}


def docker_stack(suffix: str, release: dict) -> dict:
    """Docker's package versions for one release of the role's table, on one suite."""
    containerd = release["containerd"]
    if release["containerd_os_suffix"]:
        containerd += f"~{suffix}"
    return {
        "docker-ce": f"5:{release['docker']}-1~{suffix}",
        "docker-ce-cli": f"5:{release['docker']}-1~{suffix}",
        "containerd.io": containerd,
        "docker-buildx-plugin": f"{release['buildx']}-1~{suffix}",
        "docker-compose-plugin": f"{release['compose']}-1~{suffix}",
    }


# The role's defaults per OS (roles/container_runtime/vars/main.yml); focal keeps Docker's last
# release for focal.
EXPECTED = {
    "debian12-container_runtime": {
        "source": "docker_repo",
        "suite": ("debian", "bookworm"),
        "engine": docker_stack("debian.12~bookworm", RELEASES["current"]),
    },
    "ubuntu2004-container_runtime": {
        "source": "docker_repo",
        "suite": ("ubuntu", "focal"),
        "engine": docker_stack("ubuntu.20.04~focal", RELEASES["focal"]),
    },
    "debian13-container_runtime": {
        "source": "distro",
        "suite": ("debian", "trixie"),
        # The distribution's engine: whatever Debian's archive has, held with containerd and runc.
        "engine": dict.fromkeys(["docker.io", "docker-cli", "containerd", "runc"]),
    },
}
ADMIN_KEYS = {"log-opts": {"max-size": "10m"}, "max-concurrent-downloads": 3}
NVIDIA_RUNTIME = {"args": [], "path": "nvidia-container-runtime"}


@pytest.fixture
def name(host):
    return host.backend.get_hostname()


@pytest.fixture
def expected(name):
    return EXPECTED[name]


def installed(host) -> dict[str, str]:
    out = host.check_output(
        "dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Abbrev}\\n'"
    )
    return {
        p: v
        for p, v, status in (line.split(maxsplit=2) for line in out.splitlines())
        if status[1] == "i"
    }


def daemon_json(host) -> dict:
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


# ---- repositories ------------------------------------------------------------------------------
def test_toolkit_source_is_one_deb822_entry_signed_by_its_keyring(host, fingerprints):
    fields = deb822(host.file(TOOLKIT_SOURCE).content_string)
    assert fields["Types"] == "deb"
    assert fields["URIs"] == f"{os.environ['STANDIN_URL']}/libnvidia-container/stable/deb/amd64"
    assert fields["Suites"] == "/"
    assert fields["Signed-By"] == TOOLKIT_KEYRING
    assert fingerprints(host, TOOLKIT_KEYRING) == [os.environ["STANDIN_KEY_FPR"]]


def test_docker_source_only_with_dockers_engine(host, fingerprints, expected):
    source, keyring = host.file(DOCKER_SOURCE), host.file(DOCKER_KEYRING)
    if expected["source"] == "distro":
        assert not source.exists and not keyring.exists
        return
    distro, codename = expected["suite"]
    fields = deb822(source.content_string)
    assert fields["URIs"] == f"{os.environ['STANDIN_URL']}/docker/linux/{distro}"
    assert (fields["Suites"], fields["Components"]) == (codename, "stable")
    assert fields["Architectures"] == "amd64"
    assert fields["Signed-By"] == DOCKER_KEYRING
    assert keyring.mode == 0o644
    assert fingerprints(host, DOCKER_KEYRING) == [os.environ["STANDIN_KEY_FPR"]]


def test_guide_style_definitions_are_gone_and_apt_is_clean(host, apt_problems):
    # prepare.yml left docker.list and nvidia-container-toolkit.list with other Signed-By paths.
    listed = host.check_output("ls /etc/apt/sources.list.d").split()
    assert "docker.list" not in listed and "nvidia-container-toolkit.list" not in listed
    assert not host.file("/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg").exists
    assert apt_problems(host) == []
    uris = host.check_output("apt-get indextargets --format '$(REPO_URI)'").split()
    assert len({u for u in uris if "/libnvidia-container/" in u}) == 1


# ---- packages -----------------------------------------------------------------------------------
def test_packages_installed_at_their_versions(host, expected):
    have = installed(host)
    wanted = {**expected["engine"], **TOOLKIT}
    missing = [p for p in wanted if p not in have]
    assert missing == []
    wrong = {p: have[p] for p, v in wanted.items() if v is not None and have[p] != v}
    assert wrong == {}


def test_pinned_while_newer_builds_exist(host, expected):
    pinned = {p: v for p, v in {**expected["engine"], **TOOLKIT}.items() if v is not None}
    # The stand-in has newer docker-ce (29.8.3), containerd.io (2.3.7-1) and toolkit (1.20.2-1)
    # builds, hypothetical fixture numbers (tests/standin/packages.yml).
    newer = {"nvidia-container-toolkit": "1.20.2-1", "libnvidia-container1": "1.20.2-1"}
    if expected["source"] == "docker_repo" and expected["suite"][1] != "focal":
        newer |= {"docker-ce": "5:29.8.3", "containerd.io": "2.3.7-1"}
    for package, version in newer.items():
        assert version in host.check_output(f"apt-cache madison {package}"), package
    for package, version in pinned.items():
        policy = host.check_output(f"LC_ALL=C apt-cache policy {package}")
        assert f"Candidate: {version}" in policy, package
        assert f"{version} 1001" in policy, package
    plan = host.check_output("LC_ALL=C apt-get --simulate upgrade")
    moved = [line.split()[1] for line in plan.splitlines() if line.startswith("Inst ")]
    assert [p for p in moved if p in pinned or p in expected["engine"]] == []


def test_held_and_kept_out_of_unattended_upgrades(host, expected):
    selections = dict(
        line.split() for line in host.check_output("dpkg --get-selections").splitlines()
    )
    blacklist = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    held = [*expected["engine"], *TOOLKIT]
    assert {p: selections.get(p) for p in held} == dict.fromkeys(held, "hold")
    # package_hold escapes "." (unattended-upgrades reads regexes); apt-config prints one backslash.
    escaped = [p.replace(".", "\\.") for p in held]
    assert [p for p in escaped if f'"{p}$"' not in blacklist] == []


def test_other_engine_source_not_installed(host, expected):
    have = installed(host)
    other = ["docker-ce", "containerd.io"] if expected["source"] == "distro" else ["docker.io"]
    assert [p for p in other if p in have] == []


# ---- the engine and its configuration -----------------------------------------------------------
def test_daemon_json_has_the_nvidia_runtime_and_keeps_the_admins_keys(host):
    config = daemon_json(host)
    assert config["runtimes"]["nvidia"] == NVIDIA_RUNTIME
    assert {k: config.get(k) for k in ADMIN_KEYS} == ADMIN_KEYS
    assert "default-runtime" not in config
    assert host.file("/etc/docker/daemon.json").mode == 0o644


def test_engine_enabled_and_running(host):
    service = host.service("docker.service")
    assert service.is_enabled
    assert service.is_running


def test_real_engine_reads_the_runtime_and_runs_containers(host, name):
    if EXPECTED[name]["source"] != "distro":
        pytest.skip("Docker's engine is a stand-in fixture here; Debian 13 runs the real docker.io")
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"
    # A one-binary image built here (no registry): the engine with the role's daemon.json runs it.
    host.run_expect(
        [0],
        "set -e; r=$(mktemp -d); for f in /usr/bin/echo $(ldd /usr/bin/echo | grep -o '/[^ ]*'); do"
        ' cp --parents "$f" "$r"; done; tar -C "$r" -c . | docker import - gpurig-test/echo:1',
    )
    out = host.check_output("docker run --rm --network none gpurig-test/echo:1 /usr/bin/echo ran")
    assert out == "ran"


# ---- site.yml: off unless enabled; restarts only on a changed configuration ---------------------
def invocation_ids() -> dict[str, str]:
    """systemd's InvocationID of docker.service on each instance: a new one per (re)start."""
    return {
        name: subprocess.run(
            [
                "docker",
                "exec",
                name,
                "systemctl",
                "show",
                "-p",
                "InvocationID",
                "--value",
                "docker.service",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name in INSTANCES
    }


def read_daemon_json(name: str) -> dict:
    out = subprocess.run(
        ["docker", "exec", name, "cat", "/etc/docker/daemon.json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def test_idempotent_run_did_not_restart_the_engine(host):
    # converge.yml appends docker.service's InvocationID after each run: the converge's entry and
    # the idempotence run's must be the same start of the service, and it must still be running.
    runs = host.file("/var/tmp/gpurig-test-docker-invocations").content_string.split()
    assert len(runs) >= 2
    assert runs[-1] == runs[-2]
    assert invocation_ids()[host.backend.get_hostname()] == runs[-1]


@pytest.fixture(scope="session")
def site_runs(playbook):
    """site.yml --tags container_runtime twice on every instance with a changed daemon option:
    without gpurig_container_runtime (the role must not run), then with it (the file changes:
    one restart)."""
    option = {"container_runtime_daemon_options": {"log-level": "warn"}}
    steps = {}
    before = invocation_ids()
    for step, extra in (("off", option), ("on", {**option, "gpurig_container_runtime": True})):
        run = playbook(SITE, extra_vars=extra, args=["--tags", "container_runtime"])
        steps[step] = (run, invocation_ids(), {n: read_daemon_json(n) for n in INSTANCES})
    return before, steps


def test_site_yml_leaves_the_role_off_by_default(site_runs):
    before, steps = site_runs
    run, ids, configs = steps["off"]
    assert run.rc == 0, run.failures or run.stderr[-2000:]
    assert ids == before
    assert [n for n in INSTANCES if "log-level" in configs[n]] == []
    assert {n: run.stats[n]["changed"] for n in INSTANCES} == dict.fromkeys(INSTANCES, 0)


def test_handler_restarts_the_engine_when_daemon_json_changed(site_runs):
    _, steps = site_runs
    _, off_ids, _ = steps["off"]
    run, ids, configs = steps["on"]
    assert run.rc == 0, run.failures or run.stderr[-2000:]
    assert {n: configs[n]["log-level"] for n in INSTANCES} == dict.fromkeys(INSTANCES, "warn")
    assert all(configs[n]["runtimes"]["nvidia"] == NVIDIA_RUNTIME for n in INSTANCES)
    assert all({k: configs[n].get(k) for k in ADMIN_KEYS} == ADMIN_KEYS for n in INSTANCES)
    assert [n for n in INSTANCES if ids[n] == off_ids[n] or not ids[n]] == []


# ---- refusals, host untouched ------------------------------------------------------------------
def test_refuses_a_daemon_json_that_is_not_json(host, name, refused, scenario_dir):
    if name != "debian12-container_runtime":
        pytest.skip("run once, on debian12")
    saved = host.file("/etc/docker/daemon.json").content_string
    host.check_output("printf '%s' '{\"log-level\": \"warn\",' > /etc/docker/daemon.json")
    try:
        message = refused(host, scenario_dir / "converge.yml", {})
        assert "/etc/docker/daemon.json is not a JSON object" in message
        assert host.file("/etc/docker/daemon.json").content_string == '{"log-level": "warn",'
    finally:
        host.check_output(f"printf '%s' {shlex.quote(saved)} > /etc/docker/daemon.json")


def test_refuses_a_docker_release_the_repository_lacks(host, name, refused, scenario_dir):
    # Docker publishes no 29.x for Ubuntu 20.04: asking for the other OSes' default stops cleanly.
    if name != "ubuntu2004-container_runtime":
        pytest.skip("run once, on the Ubuntu 20.04 stand-in")
    current, focal = RELEASES["current"]["docker"], RELEASES["focal"]["docker"]
    message = refused(
        host, scenario_dir / "converge.yml", {"container_runtime_docker_version": current}
    )
    assert f"docker-ce=5:{current}-1~ubuntu.20.04~focal" in message
    assert "container_runtime_docker_version" in message
    assert f"5:{focal}-1~ubuntu.20.04~focal" in message


# ---- verify.yml's container check --------------------------------------------------------------
def test_verify_records_the_container_check_only_where_enabled(host, name, playbook, tmp_path):
    if name != "debian13-container_runtime":
        pytest.skip("the real docker CLI is on Debian 13 only")
    verify = PROJECT / "playbooks/verify.yml"
    extra = {
        "verify_report_dir": str(tmp_path),
        "verify_container_registry": "registry.invalid:5000",
    }
    off = playbook(verify, limit=name, extra_vars=extra, args=["--tags", "container"])
    assert off.rc == 0, off.failures or off.stderr[-2000:]
    assert json.loads((tmp_path / f"{name}.json").read_text())["checks"] == []
    # Enabled, on a host without GPUs and an unreachable registry: a failed check, with figures.
    on = playbook(
        verify,
        limit=name,
        extra_vars={**extra, "gpurig_container_runtime": True},
        args=["--tags", "container"],
    )
    assert on.rc != 0
    (check,) = json.loads((tmp_path / f"{name}.json").read_text())["checks"]
    image = "registry.invalid:5000/nvidia/cuda:12.2.2-base-ubuntu22.04"
    assert check["check"] == "container_gpus"
    assert check["passed"] is False
    assert check["figures"] == {"container_gpus": 0, "pci_gpus": 0, "image": image}
    assert image in check["message"]

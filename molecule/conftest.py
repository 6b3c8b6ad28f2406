"""Helpers shared by the molecule scenarios' testinfra tests.

Some behaviours are refusals: a role must stop, with a message naming the variable, before it
changes the host. Those tests run ansible-playbook themselves against the scenario's instance
(molecule's inventory and configuration, taken from the environment molecule gives its
verifier) and read the per-host results from the json callback.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

PROJECT_DIR = Path(__file__).resolve().parent.parent
# The compatibility table the roles read, and the stand-in repo's manifest: the tests take the
# versions they expect from these rather than from literals of their own.
# The table is the role gpurig's vars: one variable, gpurig_compat (roles/gpurig/vars/main/).
COMPAT = yaml.safe_load((PROJECT_DIR / "roles/gpurig/vars/main/compat.yml").read_text())[
    "gpurig_compat"
]
STANDIN = yaml.safe_load((PROJECT_DIR / "tests/standin/packages.yml").read_text())


def instance_distro(host) -> str:
    """NVIDIA's repo directory of a scenario instance: every platform is named <distro>-<scenario>
    (debian12-site, ubuntu2004-nccl), the Ubuntu 20.04 stand-in included."""
    distro = host.backend.get_hostname().split("-", 1)[0]
    assert distro in COMPAT["distros"], distro
    return distro


@dataclass(frozen=True)
class DefaultStack:
    """What the roles install on a distro with no variables set, as compat.yml states it."""

    branch: str
    cuda: str
    cudnn: str
    nccl: str

    @property
    def cuda_major(self) -> str:
        return self.cuda.split(".")[0]

    @property
    def cuda_package_suffix(self) -> str:
        """cuda-toolkit-<major>-<minor>'s suffix: "13-4"."""
        return self.cuda.replace(".", "-")

    @property
    def cudnn_package_version(self) -> str:
        return f"{self.cudnn}-1"

    @property
    def nccl_package_version(self) -> str:
        return f"{self.nccl}+cuda{self.cuda}"


def default_stack(distro: str) -> DefaultStack:
    entry = COMPAT["distros"][distro]["default"]
    cuda = entry["cuda"]
    return DefaultStack(
        branch=entry["branch"],
        cuda=cuda,
        cudnn=COMPAT["cuda_major"][cuda.split(".")[0]]["cudnn"],
        nccl=COMPAT["cuda"][cuda]["nccl"],
    )


def _version_key(version: str) -> tuple[int, ...]:
    # Enough of Debian's ordering for the manifest's numeric versions (580.105.08-0ubuntu1,
    # 13.4.2-1, 2.32.3-1+cuda13.4): compare the numbers in order.
    return tuple(int(n) for n in re.findall(r"\d+", version))


def standin_versions(package: str, distro: str) -> list[str]:
    """The versions of `package` the NVIDIA stand-in offers for `distro`, oldest first."""
    found = {
        str(version)
        for pkg in STANDIN["nvidia"]
        if pkg["name"] == package and distro in pkg.get("distros", STANDIN["nvidia_keys"])
        for version in pkg["versions"]
    }
    return sorted(found, key=_version_key)


def standin_newest(package: str, distro: str, prefix: str = "") -> str:
    """The newest version of `package` (starting with `prefix`) the stand-in offers for `distro`:
    what apt installs when nothing pins an exact version."""
    versions = [v for v in standin_versions(package, distro) if v.startswith(prefix)]
    assert versions, f"the stand-in has no {package} {prefix}* for {distro}"
    return versions[-1]


@dataclass
class PlaybookRun:
    rc: int
    stdout: str
    stderr: str
    # host -> message of the first failed task on that host
    failures: dict[str, str]
    # host -> recap counters (ok, changed, failures, ...)
    stats: dict[str, dict[str, int]]


def _failures(report: dict) -> dict[str, str]:
    found: dict[str, str] = {}
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            for host, result in task.get("hosts", {}).items():
                if host in found:
                    continue
                # A loop's own message is only "One or more items failed": take the item's.
                failed = [r for r in result.get("results", []) if r.get("failed")]
                failed += [result] if result.get("failed") else []
                if failed:
                    found[host] = str(failed[0].get("msg", failed[0]))
    return found


def run_playbook(
    playbook: str | Path,
    *,
    limit: str | None = None,
    extra_vars: dict | None = None,
    inventories: list[str | Path] = (),
    args: list[str] = (),
    timeout: int = 600,
) -> PlaybookRun:
    """Run ansible-playbook against the scenario's instances; never raises on a failed play."""
    ephemeral = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
    cmd = [str(Path(sys.executable).with_name("ansible-playbook"))]
    cmd += ["-i", str(Path(ephemeral) / "inventory")]
    for inventory in inventories:
        cmd += ["-i", str(inventory)]
    if limit:
        cmd += ["--limit", limit]
    if extra_vars:
        cmd += ["--extra-vars", json.dumps(extra_vars)]
    cmd += [*args, str(playbook)]
    # stdout is parsed as JSON: no callback enabled in the caller's environment (profile_tasks
    # prints its timings there) may write to it.
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_CALLBACKS_ENABLED"}
    env.update(
        {
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_ROLES_PATH": str(PROJECT_DIR / "roles"),
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
        }
    )
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {}
    return PlaybookRun(
        rc=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        failures=_failures(report),
        stats=report.get("stats", {}),
    )


# What "nothing changed on the host" compares (the script runs inside the host).
SNAPSHOT_COMMAND = (PROJECT_DIR / "tests/infra/snapshot.sh").read_text()


def snapshot(host) -> list[str]:
    """The host's package and configuration state, line by line, for before/after comparisons."""
    return host.check_output(SNAPSHOT_COMMAND).splitlines()


@pytest.fixture(scope="session")
def playbook():
    """run_playbook, for tests that need to watch a role refuse something."""
    return run_playbook


@pytest.fixture(scope="session")
def scenario_dir() -> Path:
    return Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])


@pytest.fixture(scope="session")
def host_snapshot():
    """snapshot(host): the state a refused run must leave exactly as it was."""
    return snapshot


def refused_run(host, playbook: str | Path, extra_vars: dict) -> str:
    """Run `playbook` on `host` alone, expecting it to stop before any change there.

    Asserts that the play failed on that host and that the host's snapshot is exactly as before;
    returns the failed task's message for the caller's checks on what it says.
    """
    name = host.backend.get_hostname()
    before = snapshot(host)
    run = run_playbook(playbook, limit=name, extra_vars=extra_vars)
    assert run.rc != 0, f"the play did not stop on {name}:\n{run.stdout[-3000:]}"
    assert name in run.failures, f"no failed task on {name} (rc {run.rc}):\n{run.stderr[-3000:]}"
    assert snapshot(host) == before, f"the refused run changed {name}"
    return run.failures[name]


@pytest.fixture(scope="session")
def refused():
    """refused(host, playbook, extra_vars) -> the message of a play that must change nothing."""
    return refused_run


def key_fingerprints(host, path: str) -> list[str]:
    """The fingerprints of the primary keys in the keyring file `path` on `host`."""
    host.run_expect([0], "install -d -m 0700 /tmp/verify-gnupg")
    out = host.run_expect(
        [0], f"gpg --homedir /tmp/verify-gnupg --batch --with-colons --show-keys {path}"
    ).stdout
    return [
        b.split(":")[9]
        for a, b in itertools.pairwise(out.splitlines())
        if a.startswith("pub:") and b.startswith("fpr:")
    ]


def apt_update_problems(host) -> list[str]:
    """Run apt-get update on `host` (it must exit 0); its warning and error lines."""
    update = host.run_expect([0], "LC_ALL=C apt-get update")
    return [
        line
        for line in (update.stdout + update.stderr).splitlines()
        if line.startswith(("W:", "E:", "Err:"))
    ]


@pytest.fixture(scope="session")
def fingerprints():
    """fingerprints(host, keyring_path) -> the keyring's primary key fingerprints."""
    return key_fingerprints


@pytest.fixture(scope="session")
def apt_problems():
    """apt_problems(host) -> apt-get update's W:/E:/Err: lines (an empty list when apt is clean)."""
    return apt_update_problems


@pytest.fixture(scope="session")
def compat() -> dict:
    """compat.yml, as the roles read it."""
    return COMPAT


@pytest.fixture
def distro(host) -> str:
    """The instance's NVIDIA repo directory (debian12, ubuntu2004, debian13)."""
    return instance_distro(host)


@pytest.fixture
def defaults(distro) -> DefaultStack:
    """compat.yml's default stack for the instance's distro."""
    return default_stack(distro)


@pytest.fixture(scope="session")
def standin():
    """standin.newest(package, distro, prefix="") / standin.versions(package, distro): what the
    NVIDIA stand-in offers (tests/standin/packages.yml)."""

    class Standin:
        newest = staticmethod(standin_newest)
        versions = staticmethod(standin_versions)

    return Standin

"""site.yml --check on a fresh host: every role goes through, says what it would do, no change.

The scenario's container is created and never converged. site.yml runs once with --check against
it (molecule's inventory: the stand-in repo settings of .config/molecule/config.yml); the run must
succeed, each role must report what it would change, and the container's apt configuration, package
database and the directories the roles write must be exactly as before: no NVIDIA source, keyring
or package afterwards.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[3]
INSTANCE = "debian12-check_mode"

# The roles that stop in check mode on a fresh host, at the first step that needs what an earlier
# role (or their own download) would have put there; each says what it would do.
STOPPING_ROLES = {
    "nvidia_repo",
    "nvidia_driver",
    "cuda_toolkit",
    "cudnn",
    "nccl",
    "dcgm",
    "nccl_tests",
    "conda",
    "python_env",
    "horovod",
}


@pytest.fixture(scope="module")
def instance(host):
    if host.backend.get_hostname() != INSTANCE:
        pytest.skip("single-instance scenario")
    return host


@pytest.fixture(scope="module")
def check_run(instance, playbook, host_snapshot):
    before = host_snapshot(instance)
    run = playbook(PROJECT / "site.yml", limit=INSTANCE, args=["--check"])
    after = host_snapshot(instance)
    return run, before, after


# roles/compat/tasks/check-mode-report.yml says it for each of them:
# "Check mode: <role> would <what>".
REPORT = re.compile(r"^Check mode: (?P<role>[a-z_]+) would (?P<what>.+)$", re.S)


def would_do(run) -> dict[str, str]:
    """role -> what its check-mode report (compat's task, a change) says it would do."""
    found = {}
    for play in json.loads(run.stdout)["plays"]:
        for task in play["tasks"]:
            helper, _, name = task["task"]["name"].partition(" : ")
            result = task["hosts"].get(INSTANCE, {})
            if (helper, name) == ("compat", "Say what the role would do."):
                assert result.get("changed"), result
                report = REPORT.match(result["msg"])
                assert report, result["msg"]
                found[report["role"]] = report["what"]
    return found


def test_check_mode_goes_through_every_role(check_run):
    run, _, _ = check_run
    assert run.rc == 0, run.failures or run.stderr[-3000:]
    assert run.stats[INSTANCE]["failures"] == 0
    assert run.stats[INSTANCE]["changed"] > 0, "a fresh host must show changes to make"
    assert set(would_do(run)) == STOPPING_ROLES


def test_the_report_names_what_would_be_installed(check_run, compat):
    run, _, _ = check_run
    default = compat["distros"]["debian12"]["default"]
    cuda = default["cuda"]
    messages = would_do(run)
    assert f"driver branch {default['branch']}" in messages["nvidia_driver"]
    assert f"cuda-toolkit-{cuda.replace('.', '-')}" in messages["cuda_toolkit"]
    assert f"+cuda{cuda}" in messages["nccl"]
    assert compat["distros"]["debian12"]["key"] in messages["nvidia_repo"]
    # Debian 12 is an OS NVIDIA publishes DCGM for (compat.yml): the packages of the CUDA major its
    # default driver branch ships with (the newest release whose ships_with the branch reaches).
    shipped = [c for c, e in compat["cuda"].items() if e["ships_with"] <= int(default["branch"])]
    major = max(shipped, key=lambda c: tuple(int(n) for n in c.split("."))).split(".")[0]
    entry = compat["cuda_major"][major]
    for package in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary"):
        assert f"{package}={entry['dcgm_version']}" in messages["dcgm"]
    assert f"{entry['dcgm']}={entry['dcgm_version']}" in messages["dcgm"]


def test_nothing_changed_on_the_host(check_run):
    _, before, after = check_run
    assert after == before


def test_no_nvidia_source_keyring_or_package_afterwards(instance, check_run):
    assert not instance.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    assert not instance.file("/etc/apt/keyrings/nvidia-cuda.asc").exists
    assert not instance.file("/var/lib/gpurig").exists
    assert not instance.file("/etc/modprobe.d/blacklist-nouveau.conf").exists
    assert not instance.file("/opt/miniforge3").exists
    packages = instance.check_output("dpkg-query --show --showformat='${Package}\\n'").split()
    ours = [p for p in packages if p.startswith(("nvidia", "cuda", "libnccl", "libcudnn", "cudnn"))]
    assert ours == []

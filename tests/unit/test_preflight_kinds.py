"""The kind checks as the playbooks run them: real ansible-playbook preflights against this machine.

site.yml --tags preflight, playbooks/upgrade-driver.yml and playbooks/verify.yml run against local
aliases of this host (connection local), each alias with one bad value users reported. Each must
stop at the preflight with a message that leads with the variable and shows the value; an alias
with no bad value passes site.yml's preflight, so the roles' own defaults (templated where they
render) pass their kinds too. Nothing here changes the machine: a preflight only reads,
and upgrade-driver.yml and verify.yml are only run with values they refuse before any change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(
    not PLAYBOOK.exists() or not Path("/etc/debian_version").exists(),
    reason="needs ansible-playbook beside this Python and a Debian or Ubuntu host (compat.yml's)",
)

# alias -> (variables, variable the message must lead with, the value as the message shows it)
SITE_CASES: dict[str, tuple[dict, str, str]] = {
    "horovod-build-jobs-0": ({"horovod_build_jobs": 0}, "horovod_build_jobs", "0"),
    "horovod-build-jobs-minus-1": ({"horovod_build_jobs": -1}, "horovod_build_jobs", "-1"),
    "nccl-tests-build-jobs-0": ({"nccl_tests_build_jobs": 0}, "nccl_tests_build_jobs", "0"),
    "torch-newest": (
        {"python_env_torch_version": "newest"},
        "python_env_torch_version",
        '"newest"',
    ),
    "conda-version-injection": (
        {"conda_version": "26.3.2-3;reboot"},
        "conda_version",
        '"26.3.2-3;reboot"',
    ),
    "conda-channel-alias-http": (
        {"conda_channel_alias": "http://conda.mirror.example"},
        "conda_channel_alias",
        '"http://conda.mirror.example"',
    ),
    "nccl-tests-url-http": (
        {"nccl_tests_url": "http://mirror.example/nccl-tests.tar.gz"},
        "nccl_tests_url",
        '"http://mirror.example/nccl-tests.tar.gz"',
    ),
    "cupy-package-unknown": (
        {"python_env_cupy_package": "cupy-cuda11x"},
        "python_env_cupy_package",
        '"cupy-cuda11x"',
    ),
    "compute-capability-dotted": (
        {"horovod_cuda_cc_list": ["9.0"]},
        "horovod_cuda_cc_list",
        '["9.0"]',
    ),
    "cuda-home-relative": (
        {"nccl_tests_cuda_home": "usr/local/cuda"},
        "nccl_tests_cuda_home",
        '"usr',
    ),
    "key-fingerprint-short": (
        {"nvidia_repo_key_fingerprint": "3BF863CC"},
        "nvidia_repo_key_fingerprint",
        '"3BF863CC"',
    ),
    # A Debian version, but not DCGM 4's with NVIDIA's epoch: roles/dcgm's validate.yml refuses it.
    "dcgm-version-without-epoch": ({"dcgm_version": "4.5.2-1"}, "dcgm_version", '"4.5.2-1"'),
}
GOOD_ALIASES = {
    "good": {},
    # The container runtime's validate.yml loops over its URLs and fingerprints.
    "good-with-containers": {"gpurig_container_runtime": True},
    # The allow flags let plain http through.
    "good-http-allowed": {
        "conda_channel_alias": "http://conda.mirror.example",
        "conda_installer_allow_http": True,
        "nccl_tests_url": "http://mirror.example/nccl-tests.tar.gz",
        "nccl_tests_allow_http": True,
    },
}
FAILED_LINE = re.compile(
    r"^(?:fatal|failed): \[(?P<host>[^\]]+)\].*?=> (?P<result>\{.*\})\s*$", re.M
)


def run(playbook: str, inventory: Path, *args: str) -> subprocess.CompletedProcess:
    # the failed tasks are read from stdout: no callback of the caller's environment may add to it.
    env = {
        **{k: v for k, v in os.environ.items() if k != "ANSIBLE_CALLBACKS_ENABLED"},
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
    }
    return subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), *args, str(REPO / playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def failures(output: str) -> dict[str, str]:
    """host -> message of its first failed task (a loop's: the failed item's)."""
    found: dict[str, str] = {}
    for match in FAILED_LINE.finditer(output):
        result = json.loads(match["result"])
        found.setdefault(match["host"], str(result.get("msg", result)))
    return found


def inventory(path: Path, aliases: dict[str, dict]) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {name: {**local, **variables} for name, variables in aliases.items()}
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts}}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def site_preflight(tmp_path_factory):
    aliases = {
        **GOOD_ALIASES,
        **{name: variables for name, (variables, _, _) in SITE_CASES.items()},
    }
    path = inventory(tmp_path_factory.mktemp("preflight") / "hosts.yml", aliases)
    # The contact checks reach the real sources: not from a unit test.
    proc = run("site.yml", path, "--tags", "preflight", "-e", "gpurig_contact_checks=false")
    return proc, failures(proc.stdout)


@pytest.mark.parametrize("alias", list(SITE_CASES))
def test_site_preflight_refuses_naming_the_variable_and_value(site_preflight, alias):
    proc, failed = site_preflight
    _, variable, shown = SITE_CASES[alias]
    assert alias in failed, (
        f"{alias} passed the preflight:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}"
    )
    assert failed[alias].startswith(variable + " "), failed[alias]
    assert f"(got {shown}" in failed[alias], failed[alias]


def test_site_preflight_passes_good_values_and_defaults(site_preflight):
    proc, failed = site_preflight
    # A role's validate.yml looping over `item` inside the preflight's loop over roles drew
    # "The loop variable 'item' is already in use" (the loops over roles name their variable).
    assert "is already in use" not in proc.stdout + proc.stderr
    for alias in GOOD_ALIASES:
        assert alias not in failed, failed.get(alias)
        assert re.search(
            rf"^{re.escape(alias)}\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0",
            proc.stdout,
            re.M,
        )


def test_upgrade_driver_refuses_a_bad_serial_without_a_traceback(tmp_path):
    proc = run(
        "playbooks/upgrade-driver.yml",
        inventory(tmp_path / "hosts.yml", {"node": {}}),
        "-e",
        "upgrade_driver_serial=abc",
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    message = failures(proc.stdout)["node"]
    assert message.startswith(
        "upgrade_driver_serial must be a number of hosts, at least 1, or a percentage"
    )
    assert '(got "abc")' in message
    # Nothing after the check ran: the upgrade play never started.
    assert "Upgrade the NVIDIA driver" not in proc.stdout


def test_upgrade_driver_checks_the_driver_variables_up_front(tmp_path):
    proc = run(
        "playbooks/upgrade-driver.yml",
        inventory(tmp_path / "hosts.yml", {"node": {"nvidia_driver_reboot_timeout": -5}}),
    )
    assert proc.returncode != 0
    assert failures(proc.stdout)["node"].startswith("nvidia_driver_reboot_timeout must be")
    assert "Upgrade the NVIDIA driver" not in proc.stdout


def test_verify_refuses_a_bad_value_before_any_check(tmp_path):
    proc = run(
        "playbooks/verify.yml",
        inventory(tmp_path / "hosts.yml", {"node": {"horovod_build_jobs": "0"}}),
    )
    assert proc.returncode != 0
    assert (
        failures(proc.stdout)["node"]
        == 'horovod_build_jobs must be a whole number, at least 1 (got "0").'
    )
    assert "Count NVIDIA GPUs" not in proc.stdout

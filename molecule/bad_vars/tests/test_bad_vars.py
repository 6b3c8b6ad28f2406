"""Bad variables for every role, each rejected by site.yml before anything changes on the host.

site.yml runs once against the scenario's containers through one inventory alias per case (the
Debian 12 container, or the Ubuntu 20.04 stand-in for the cases only Ubuntu reaches), so every
case goes through the real entry point and its preflight, in one ansible-playbook run. Each alias
must fail with a message naming the variable; the containers' apt state, package database and the
files the roles write must be unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import COMPAT  # molecule/conftest.py: the table as the roles read it

PROJECT = Path(__file__).resolve().parents[3]
INSTANCE = "debian12-bad_vars"
# The Ubuntu 20.04 stand-in (Debian userland, Ubuntu facts), managed through Ubuntu 20.04's Python.
UBUNTU_INSTANCE = "ubuntu2004-bad_vars"
UBUNTU_PYTHON = "/root/.pyenv/versions/3.8.18/bin/python3.8"

# id -> (variables set on the alias, variable the message must name, fragment it must contain)
CASES: dict[str, tuple[dict, str, str]] = {
    # gpu_prereqs
    "require_gpu not a boolean": (
        {"gpu_prereqs_require_gpu": "sometimes"},
        "gpu_prereqs_require_gpu",
        "bool",
    ),
    "extra package not a package name": (
        {"gpu_prereqs_extra_packages": ["build essential"]},
        "gpu_prereqs_extra_packages",
        "build essential",
    ),
    "apt cache valid time negative": (
        {"gpu_prereqs_apt_cache_valid_time": -60},
        "gpu_prereqs_apt_cache_valid_time",
        "-60",
    ),
    # nvidia_repo
    "repo over http without opt-in": (
        {"nvidia_repo_allow_http": False},
        "nvidia_repo_base_url",
        "nvidia_repo_allow_http",
    ),
    "repo URL not http(s)": (
        {"nvidia_repo_base_url": "ftp://mirror.example/cuda/repos"},
        "nvidia_repo_base_url",
        "ftp://",
    ),
    "key fingerprint is a short id": (
        {"nvidia_repo_key_fingerprint": "3BF863CC"},
        "nvidia_repo_key_fingerprint",
        "3BF863CC",
    ),
    "proxy without scheme": (
        {"nvidia_repo_https_proxy": "proxy.example:3128"},
        "nvidia_repo_https_proxy",
        "proxy.example:3128",
    ),
    # nvidia_driver
    "driver branch two digits": (
        {"gpurig_driver_branch": "53"},
        "gpurig_driver_branch",
        '"53"',
    ),
    "driver branch with an r prefix": (
        {"gpurig_driver_branch": "r535"},
        "gpurig_driver_branch",
        "r535",
    ),
    "unknown driver source": (
        {"nvidia_driver_source": "canonical"},
        "nvidia_driver_source",
        "canonical",
    ),
    "open modules with distro packages": (
        {"nvidia_driver_source": "distro", "nvidia_driver_open_kernel_modules": True},
        "nvidia_driver_open_kernel_modules",
        "nvidia_driver_source",
    ),
    "unknown reboot mode": (
        {"nvidia_driver_reboot": "sometimes"},
        "nvidia_driver_reboot",
        "sometimes",
    ),
    "reboot timeout zero": (
        {"nvidia_driver_reboot_timeout": 0},
        "nvidia_driver_reboot_timeout",
        "60",
    ),
    "driver branch NVIDIA does not publish": (
        {"gpurig_driver_branch": "999"},
        "gpurig_driver_branch",
        '"999" is not a branch NVIDIA publishes for debian12',
    ),
    # Canonical's -server packages: only the branches compat.yml lists for the release (20.04: 535)
    "distro driver branch Canonical does not publish (Ubuntu 20.04)": (
        {"nvidia_driver_source": "distro", "gpurig_driver_branch": "580"},
        "gpurig_driver_branch",
        '"580" is not a branch Canonical publishes as -server packages for ubuntu2004',
    ),
    # A branch past its end of life (compat.yml's branches), without nvidia_driver_allow_eol_branch.
    "driver branch past its end of life": (
        {"gpurig_driver_branch": "535"},
        "gpurig_driver_branch",
        f'"535" reached its end of life in {COMPAT["branches"]["535"]["end_of_life"]}',
    ),
    "allow_eol_branch not a boolean": (
        {"gpurig_driver_branch": "535", "nvidia_driver_allow_eol_branch": "sometimes"},
        "nvidia_driver_allow_eol_branch",
        "bool",
    ),
    "driver version of another branch": (
        {"nvidia_driver_version": "550.127.08"},
        "nvidia_driver_version",
        "550.127.08",
    ),
    # cuda_toolkit
    "CUDA version unquoted (float)": (
        {"gpurig_cuda_version": 12.2},
        "gpurig_cuda_version",
        "float",
    ),
    # CUDA 13 needs R580 (compat.yml's min_branch); 570 is past its end of life, allowed here so
    # that the CUDA check is the one that refuses.
    "CUDA 13.0 on driver branch 570": (
        {
            "gpurig_cuda_version": "13.0",
            "gpurig_driver_branch": "570",
            "nvidia_driver_allow_eol_branch": True,
        },
        "gpurig_cuda_version",
        f"needs driver branch {COMPAT['cuda']['13.0']['min_branch']}",
    ),
    # CUDA 13.5 is in compat.yml's cuda table but has no NCCL build: no OS lists it, so the toolkit
    # refuses it (were one to list it, nccl would, having no default nccl_version for it).
    "CUDA 13.5, which has no NCCL build": (
        {"gpurig_cuda_version": "13.5"},
        "gpurig_cuda_version",
        "NVIDIA publishes no CUDA 13.5",
    ),
    "CUDA 11": (
        {"gpurig_cuda_version": "11.8"},
        "gpurig_cuda_version",
        "11.8",
    ),
    "toolkit package version of another minor": (
        {"cuda_toolkit_package_version": "12.4.1-1"},
        "cuda_toolkit_package_version",
        "12.4.1-1",
    ),
    # cudnn
    "cuDNN archive without checksum": (
        {
            "cudnn_source": "archive",
            "cudnn_archive_path": "/srv/cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz",
        },
        "cudnn_archive_sha256",
        'got ""',
    ),
    "cuDNN 8.8 (no CUDA 12 build)": (
        {"cudnn_version": "8.8.1.3"},
        "cudnn_version",
        "8.8.1.3",
    ),
    "unknown cuDNN source": (
        {"cudnn_source": "tarball"},
        "cudnn_source",
        "tarball",
    ),
    "archive path with the repo source": (
        {"cudnn_archive_path": "/srv/cudnn.tar.xz"},
        "cudnn_archive_path",
        "cudnn_source",
    ),
    # nccl
    "NCCL version with the CUDA suffix": (
        {"nccl_version": "2.18.5-1+cuda12.2"},
        "nccl_version",
        "2.18.5-1+cuda12.2",
    ),
    # A former name: its value would be ignored, so it is refused with the present one.
    "NCCL's CUDA release under its former name": (
        {"nccl_cuda_version": "12.4"},
        "nccl_cuda_version",
        "nccl_cuda_version is now gpurig_cuda_version",
    ),
    # dcgm
    "dcgm_enabled not a boolean": (
        {"dcgm_enabled": "sometimes"},
        "dcgm_enabled",
        "bool",
    ),
    "DCGM version without NVIDIA's epoch": (
        {"dcgm_version": "4.5.2-1"},
        "dcgm_version",
        '"4.5.2-1"',
    ),
    "DCGM's driver branch under its former name": (
        {"dcgm_driver_branch": "535"},
        "dcgm_driver_branch",
        "dcgm_driver_branch is now gpurig_driver_branch",
    ),
    # conda
    "conda installer checksum too short": (
        {"conda_installer_sha256": "abc123"},
        "conda_installer_sha256",
        "abc123",
    ),
    "conda prefix relative": (
        {"gpurig_conda_prefix": "opt/miniforge3"},
        "gpurig_conda_prefix",
        "absolute",
    ),
    "conda channels with Anaconda's defaults": (
        {"gpurig_conda_channels": ["conda-forge", "defaults"]},
        "gpurig_conda_channels",
        "terms of service",
    ),
    # python_env
    "unknown python_env provider": (
        {"python_env_provider": "pip"},
        "python_env_provider",
        "pip",
    ),
    # The venv provider on Ubuntu 20.04's own interpreter: too old for any torch compat.yml names.
    "venv provider with Ubuntu 20.04's own Python 3.8 (Ubuntu 20.04)": (
        {
            "python_env_provider": "venv",
            "python_env_venv_python": UBUNTU_PYTHON,
            "gpurig_env_path": "/opt/venvs/train",
        },
        "python_env_venv_python",
        "is Python 3.8;",
    ),
    "venv provider with the environment's path left inside Miniforge": (
        {"python_env_provider": "venv"},
        "gpurig_env_path",
        "lies inside gpurig_conda_prefix",
    ),
    # TensorFlow: a Python outside the range compat.yml names for its release (the
    # conda provider's Python; torch 2.15 accepts 3.14), a package with a version, Horovod for it.
    "TensorFlow with a Python it has no wheel for": (
        {"python_env_install_tensorflow": True, "python_env_python_version": "3.14"},
        "python_env_python_version",
        f"publishes wheels for Python {COMPAT['tensorflow']['min_python']} to "
        f"{COMPAT['tensorflow']['max_python']} only",
    ),
    "TensorFlow that brings Keras 2": (
        {"python_env_install_tensorflow": True, "python_env_tensorflow_version": "2.15.1"},
        "python_env_tensorflow_version",
        '"2.15.1" installs Keras 2',
    ),
    "TensorFlow package with a version": (
        {
            "python_env_install_tensorflow": True,
            "python_env_tensorflow_package": "tensorflow==2.20.0",
        },
        "python_env_tensorflow_package",
        '"tensorflow==2.20.0"',
    ),
    "TensorFlow in torch's environment": (
        {
            "python_env_install_tensorflow": True,
            "python_env_tensorflow_path": "/opt/miniforge3/envs/train/",
        },
        "python_env_tensorflow_path",
        "is torch's environment",
    ),
    "Horovod for TensorFlow": (
        {"horovod_with_tensorflow": True},
        "horovod_with_tensorflow",
        "horovod/horovod#4290",
    ),
    # horovod
    "unknown horovod operations": (
        {"horovod_gpu_operations": "mpi"},
        "horovod_gpu_operations",
        "mpi",
    ),
    "horovod check_build not a boolean": (
        {"horovod_check_build": "perhaps"},
        "horovod_check_build",
        "bool",
    ),
    "horovod version not a release": (
        {"horovod_version": "latest"},
        "horovod_version",
        '"latest"',
    ),
    # nccl_tests
    "nccl-tests checksum too short": (
        {"nccl_tests_sha256": "abc123"},
        "nccl_tests_sha256",
        "abc123",
    ),
    # nvbandwidth
    "nvbandwidth release not a release": (
        {"nvbandwidth_version": "latest"},
        "nvbandwidth_version",
        '"latest"',
    ),
    # container_runtime (checked only where site.yml runs it: gpurig_container_runtime)
    "unknown container engine source": (
        {"gpurig_container_runtime": True, "container_runtime_engine_source": "podman"},
        "container_runtime_engine_source",
        "podman",
    ),
    "toolkit version without its revision": (
        {"gpurig_container_runtime": True, "container_runtime_toolkit_version": "1.20.0"},
        "container_runtime_toolkit_version",
        '"1.20.0"',
    ),
    "docker version with Docker's epoch and suffix": (
        {
            "gpurig_container_runtime": True,
            "container_runtime_docker_version": "5:29.4.1-1~debian.12~bookworm",
        },
        "container_runtime_docker_version",
        "5:29.4.1-1~debian.12~bookworm",
    ),
    "container runtime switch not a boolean": (
        {"gpurig_container_runtime": "sometimes"},
        "gpurig_container_runtime",
        "sometimes",
    ),
    # site.yml: a misspelt variable, refused with gpurig_strict_vars (a warning without it)
    # Two letters swapped: the hint names the one variable with the same letters (a misspelt middle
    # word would also match every nvidia_..._branch, e.g. nvidia_driver_allow_eol_branch).
    "misspelt variable, strict": (
        {"nvidia_driver_brnach": "550", "gpurig_strict_vars": True},
        "nvidia_driver_brnach",
        "did you mean gpurig_driver_branch",
    ),
    "strict flag not a boolean": (
        {"gpurig_strict_vars": "sometimes"},
        "gpurig_strict_vars",
        "sometimes",
    ),
    # The preflight's contact check (roles/repo_contact): values that pass every format check but
    # that the sources do not carry, refused before any change, with what the source offers.
    "cuDNN release missing from NVIDIA's repository": (
        {"cudnn_version": "9.99.0.1"},
        "cudnn_version",
        "cudnn9-cuda-13=9.99.0.1-1 is not in",
    ),
    "driver branch missing from NVIDIA's repository": (
        {"gpurig_driver_branch": "620"},
        "gpurig_driver_branch",
        "cuda-drivers-620 620.* is not in",
    ),
    "torch missing from the index": (
        {"python_env_torch_version": "2.99.0"},
        "python_env_torch_version",
        "no torch==2.99.0 wheel for CPython 3.11",
    ),
}


def alias(case: str) -> str:
    return "bad-" + re.sub(r"[^a-z0-9]+", "-", case.lower()).strip("-")


def on_ubuntu(case: str) -> bool:
    """Cases that only an Ubuntu host reaches run on the Ubuntu 20.04 stand-in."""
    return case.endswith("(Ubuntu 20.04)")


def connection(case: str) -> dict:
    if on_ubuntu(case):
        return {
            "ansible_connection": "community.docker.docker",
            "ansible_host": UBUNTU_INSTANCE,
            "ansible_python_interpreter": UBUNTU_PYTHON,
        }
    return {"ansible_connection": "community.docker.docker", "ansible_host": INSTANCE}


def write_inventory(path: Path, cases: dict[str, dict]) -> Path:
    """One host per case, each the scenario's Debian 12 or Ubuntu 20.04 container, in group
    gpu_nodes."""
    hosts = {alias(case): {**connection(case), **variables} for case, variables in cases.items()}
    inventory = {"gpu_nodes": {"children": {"cases": {"hosts": hosts}}}}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def warnings_by_host(report: str) -> dict[str, str]:
    """host -> the message of site.yml's warning about undeclared variables (json callback)."""
    found = {}
    for play in json.loads(report)["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].startswith("Name the variables that look like a role's"):
                for host, result in task["hosts"].items():
                    if not result.get("skipped"):
                        found[host] = result["msg"]
    return found


@pytest.fixture(scope="module")
def instance(host):
    if host.backend.get_hostname() != INSTANCE:
        pytest.skip("single-instance scenario")
    return host


@pytest.fixture(scope="module")
def instances(instance):
    """Both containers (the Ubuntu one reached through the same molecule inventory)."""
    ubuntu = instance.get_host(
        f"ansible://{UBUNTU_INSTANCE}", ansible_inventory=instance.backend.ansible_inventory
    )
    return [instance, ubuntu]


@pytest.fixture(scope="module")
def site_run(instances, playbook, host_snapshot, tmp_path_factory):
    """site.yml with every bad case at once, and the containers' state around it."""
    assert any(on_ubuntu(case) for case in CASES) and not all(on_ubuntu(case) for case in CASES)
    inventory = write_inventory(
        tmp_path_factory.mktemp("bad_vars") / "cases.yml",
        {case: variables for case, (variables, _, _) in CASES.items()},
    )
    before = [host_snapshot(h) for h in instances]
    run = playbook(PROJECT / "site.yml", inventories=[inventory], limit="cases")
    after = [host_snapshot(h) for h in instances]
    return run, before, after


@pytest.mark.parametrize("case", list(CASES))
def test_rejected_naming_the_variable(site_run, case):
    run, _, _ = site_run
    _, variable, fragment = CASES[case]
    message = run.failures.get(alias(case))
    assert message is not None, f"{case}: site.yml did not fail ({run.stderr[-2000:]})"
    assert variable in message
    assert fragment in message


def test_nothing_changed_on_the_host(site_run):
    run, before, after = site_run
    assert run.rc != 0
    assert {host: stats["changed"] for host, stats in run.stats.items()} == {
        alias(case): 0 for case in CASES
    }
    assert after[0] == before[0], "the Debian 12 container changed"
    assert after[1] == before[1], "the Ubuntu 20.04 stand-in changed"


def test_good_variables_pass_the_preflight(instance, playbook, tmp_path):
    # The same aliasing with valid variables: preflight (--tags preflight) passes, so the cases
    # above fail because of their bad value, not because of how they are run. Without
    # gpurig_strict_vars a misspelt variable passes too, named in a warning.
    good = {
        "good": {},
        "misspelt": {"nvidia_driver_brnach": "550"},
        # TensorFlow on, with the conda provider's default Python (in TensorFlow's range).
        "tensorflow": {"python_env_install_tensorflow": True},
        # A branch Canonical does publish for 20.04, with a CUDA release that branch runs.
        "good distro branch (Ubuntu 20.04)": {
            "nvidia_driver_source": "distro",
            "gpurig_driver_branch": "535",
            "nvidia_driver_allow_eol_branch": True,
            "gpurig_cuda_version": "12.2",
        },
    }
    inventory = write_inventory(tmp_path / "good.yml", good)
    run = playbook(
        PROJECT / "site.yml", inventories=[inventory], limit="cases", args=["--tags", "preflight"]
    )
    assert run.rc == 0, run.failures or run.stderr[-2000:]
    for case in good:
        assert run.stats[alias(case)]["failures"] == 0
        assert run.stats[alias(case)]["changed"] == 0
    warnings = warnings_by_host(run.stdout)
    assert alias("good") not in warnings
    assert "nvidia_driver_brnach" in warnings[alias("misspelt")]
    assert "did you mean gpurig_driver_branch" in warnings[alias("misspelt")]


def test_cases_cover_every_role():
    # The roles site.yml runs (its site_role_groups), and gpurig, whose values they share. The
    # others (package_hold, repo_contact, apt_source) are called by those roles with values they
    # compute, never by users (repo_contact's refusals are the contact-check cases above, named by
    # user variables).
    (play,) = yaml.safe_load((PROJECT / "site.yml").read_text())
    roles = set(play["vars"]["site_role_groups"]) | {"gpurig"}
    named = {variable for _, variable, _ in CASES.values()}
    uncovered = {role for role in roles if not any(v.startswith(role + "_") for v in named)}
    assert uncovered == set(), f"no bad-variable case for {sorted(uncovered)}"

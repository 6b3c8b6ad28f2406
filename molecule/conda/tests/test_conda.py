"""State the conda role leaves on the host.

The installer is a TEST FIXTURE (molecule/conda/files/miniforge-installer-fixture.sh): these tests
check what the role did with it (verified it, ran it once with the right command line, configured
conda around it), never what the fixture itself printed or installed beyond the layout it mimics.
"""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

PREFIX = "/opt/miniforge3"
LOCAL_PREFIX = "/opt/miniforge-local"
PROJECT = Path(__file__).resolve().parents[3]
FIXTURE = PROJECT / ".work/www/installers/Miniforge3-fixture-Linux-x86_64.sh"
# The release the role records: its default conda_version (the converge sets none).
CONDA_VERSION = yaml.safe_load((PROJECT / "roles/conda/defaults/main.yml").read_text())[
    "conda_version"
]


def fixture_sha256():
    return hashlib.sha256(FIXTURE.read_bytes()).hexdigest()


@pytest.mark.parametrize("prefix", ["/opt/miniforge-tampered", "/opt/miniforge-wrong-local"])
def test_refused_installers_left_nothing(host, prefix):
    assert not host.file(prefix).exists


@pytest.mark.parametrize(
    "staging", ["/var/cache/gpurig/conda", "/var/cache/gpurig/conda-wrong-local"]
)
def test_no_installer_left_in_staging(host, staging):
    # The tampered download never reached its destination; the mismatching local copy was removed;
    # the accepted installers were removed after they ran.
    assert host.file(staging).is_directory
    assert host.file(staging).mode == 0o700
    assert host.run_expect([0], f"find {staging} -type f").stdout == ""


@pytest.mark.parametrize("prefix", [PREFIX, LOCAL_PREFIX])
def test_installer_ran_exactly_once(host, prefix):
    # converge + idempotence = two plays of the role; the fixture appends one line per run.
    runs = host.file(f"{prefix}/.fixture-installer-runs").content_string.splitlines()
    assert runs == [f"run: -b -p {prefix}"]


@pytest.mark.parametrize("prefix", [PREFIX, LOCAL_PREFIX])
def test_release_recorded(host, prefix):
    record = host.file(f"{prefix}/.gpurig-miniforge.json")
    assert record.user == "root"
    assert json.loads(record.content_string) == {
        "version": CONDA_VERSION,
        "installer_sha256": fixture_sha256(),
    }


def test_condarc_is_conda_forge_only(host):
    condarc = host.file(f"{PREFIX}/.condarc")
    assert condarc.mode == 0o644
    assert yaml.safe_load(condarc.content_string) == {
        "channels": ["conda-forge"],
        "channel_priority": "strict",
        "auto_update_conda": False,
        "auto_activate": False,
    }


def test_condarc_with_mirror_and_extra_channel(host):
    settings = yaml.safe_load(host.file(f"{LOCAL_PREFIX}/.condarc").content_string)
    assert settings["channels"] == ["conda-forge", "bioconda"]
    assert settings["channel_alias"] == "https://conda.mirror.example.internal"
    assert "defaults" not in settings["channels"]


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_login_shells_find_condabin_once(host, shell):
    script = host.file("/etc/profile.d/miniforge.sh")
    assert script.mode == 0o644
    assert script.user == "root"
    # Sourcing it again (a nested login shell) must not add condabin twice.
    out = host.run_expect([0], f"{shell} -lc '. /etc/profile.d/miniforge.sh; echo \"$PATH\"'")
    path = out.stdout.strip().split(":")
    assert path.count(f"{PREFIX}/condabin") == 1
    assert f"{PREFIX}/bin" not in path  # the base env's python must not shadow the system's


def test_no_login_script_when_shell_init_is_off(host):
    # The second install ran with conda_shell_init: false and its own script path.
    assert not host.file("/etc/profile.d/miniforge-local.sh").exists

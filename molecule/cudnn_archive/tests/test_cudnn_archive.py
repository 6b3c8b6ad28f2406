"""State the cudnn role leaves from the archive route, and the archives it refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOME = "/opt/cudnn/8.9.7.29"
# Written by prepare.yml from the fixture it built.
FIXTURE_VARS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "cudnn-fixture" / "vars.yml"


def fixture_vars() -> dict[str, str]:
    return dict(line.split(": ", 1) for line in FIXTURE_VARS.read_text().splitlines())


def make_archive(scenario_dir: Path, out: Path, *args: str) -> dict[str, str]:
    """Another fixture tarball, built by the same script prepare used."""
    proc = subprocess.run(
        [sys.executable, str(scenario_dir / "make_fixture.py"), "--out", str(out), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def test_release_extracted_under_prefix(host):
    assert host.file(f"{HOME}/include/cudnn_version.h").is_file
    assert host.file(f"{HOME}/lib/libcudnn.so.8").is_symlink
    assert host.file(f"{HOME}/lib/libcudnn.so.8").linked_to == f"{HOME}/lib/libcudnn.so.8.9.7"


def test_extracted_files_belong_to_root(host):
    # The tarball's members belong to uid 1000; tar running as root would keep that owner.
    foreign = host.check_output(f"find {HOME} ! -user root -o ! -group root")
    assert foreign == ""


def test_release_records_its_archive_checksum(host):
    marker = host.file(f"{HOME}/.gpurig-archive-sha256").content_string.strip()
    assert marker == fixture_vars()["cudnn_archive_sha256"]


def test_dynamic_linker_searches_release(host):
    scanned = host.check_output("ldconfig -v 2>/dev/null | grep -v '^\\s'")
    assert f"{HOME}/lib:" in scanned


def test_no_staging_left_behind(host):
    assert host.check_output("find /tmp /var/tmp -maxdepth 1 -name '*-gpurig-cudnn'") == ""


REFUSALS = {
    "wrong checksum": {
        "build": ["--version", "8.9.6.50"],
        "sha256": "0" * 64,
        "expect": ["Refusing", "cudnn_archive_sha256"],
    },
    "header states another version": {
        "build": ["--version", "8.9.6.50", "--header-version", "8.9.5"],
        "expect": ["states cuDNN 8.9.5", "cudnn_version is 8.9.6.50"],
    },
    "no header in the archive": {
        "build": ["--version", "8.9.6.50", "--no-header"],
        "expect": ["cudnn_archive_path", "has no <top>/include/cudnn_version.h"],
    },
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_refused_before_extraction(host, case, tmp_path, refused, scenario_dir):
    name = host.backend.get_hostname()
    if not name.startswith("debian12"):
        pytest.skip("run once, on debian12")
    spec = REFUSALS[case]
    archive = make_archive(scenario_dir, tmp_path, *spec["build"])
    message = refused(
        host,
        scenario_dir / "converge.yml",
        {
            "cudnn_version": "8.9.6.50",
            "cudnn_archive_path": archive["path"],
            "cudnn_archive_sha256": spec.get("sha256", archive["sha256"]),
        },
    )
    for fragment in spec["expect"]:
        assert fragment in message
    assert not host.file("/opt/cudnn/8.9.6.50").exists
    assert host.check_output("find /tmp /var/tmp -maxdepth 1 -name '*-gpurig-cudnn'") == ""

"""pyproject.toml as current setuptools reads it: no deprecation warnings during set-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from setuptools.config.pyprojecttoml import read_configuration

ROOT = Path(__file__).resolve().parents[2]


def test_setuptools_reads_pyproject_without_warnings() -> None:
    # a TOML-table license printed "project.license as a TOML table is deprecated" on every
    # build step of scripts/bootstrap.sh. In a fresh interpreter, as a build runs it: whatever
    # this test process imported before (distutils, through other packages) must not count.
    script = (
        "import warnings\n"
        "from setuptools.config.pyprojecttoml import apply_configuration\n"
        "from setuptools.dist import Distribution\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    dist = apply_configuration(Distribution(), 'pyproject.toml')\n"
        "print(json.dumps({'warnings': [str(w.message) for w in caught],\n"
        "                  'license': dist.metadata.license_expression}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import json\n" + script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"warnings": [], "license": "Apache-2.0"}


def test_build_requires_a_setuptools_that_reads_spdx_licenses() -> None:
    # SPDX license strings (PEP 639) need setuptools 77 or later
    build = read_configuration(ROOT / "pyproject.toml", expand=False)["build-system"]
    setuptools = next(Requirement(r) for r in build["requires"] if r.startswith("setuptools"))
    assert "76.1" not in setuptools.specifier and "77.0" in setuptools.specifier

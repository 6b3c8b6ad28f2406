"""pyproject.toml as current setuptools reads it: no deprecation warnings during set-up."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from setuptools.config.pyprojecttoml import apply_configuration, read_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]


def test_setuptools_reads_pyproject_without_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # a TOML-table license printed "project.license as a TOML table is deprecated" on every
    # build step of scripts/bootstrap.sh
    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message) for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"


def test_build_requires_a_setuptools_that_reads_spdx_licenses() -> None:
    # SPDX license strings (PEP 639) need setuptools 77 or later
    build = read_configuration(ROOT / "pyproject.toml", expand=False)["build-system"]
    setuptools = next(Requirement(r) for r in build["requires"] if r.startswith("setuptools"))
    assert "76.1" not in setuptools.specifier and "77.0" in setuptools.specifier

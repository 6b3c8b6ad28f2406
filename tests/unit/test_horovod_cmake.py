"""The horovod role's build configures under CMake 4 (a regression found on the H100).

Horovod 0.28.1's bundled gloo starts with `cmake_minimum_required(VERSION 2.8.12 FATAL_ERROR)`
(third_party/gloo/CMakeLists.txt of the sdist), which CMake >= 4.0 refuses ("Compatibility with
CMake < 3.5 has been removed from CMake"): the role's build failed that way with pip's cmake 4.4 on
the GPU machine (docs/results/2026-11-25-h100). The build task's environment sets
CMAKE_POLICY_VERSION_MINIMUM. This test configures a project that asks what gloo asks with a real
CMake 4 (the test extra's cmake wheel), without and with the role's environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUILD_TASKS = ROOT / "roles/horovod/tasks/build.yml"
GLOO_FIRST_LINE = "cmake_minimum_required(VERSION 2.8.12 FATAL_ERROR)"


def role_build_env() -> dict[str, str]:
    """The literal variables of the role's wheel-build environment (horovod_build_env)."""
    block = next(t for t in yaml.safe_load(BUILD_TASKS.read_text()) if "block" in t)["block"]
    build = next(t for t in block if t["name"].startswith("Build the Horovod wheel"))
    env = build["vars"]["horovod_build_env"]
    return {k: str(v) for k, v in env.items() if "{{" not in str(v)}


def cmake_4() -> str:
    found = Path(sys.executable).with_name("cmake")
    cmake = str(found) if found.exists() else shutil.which("cmake")
    if cmake is None:
        pytest.fail("no cmake: the test extra installs one (pyproject.toml)")
    version = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=True)
    major = int(version.stdout.split()[2].split(".")[0])
    if major < 4:
        pytest.fail(f"{cmake} is {version.stdout.split()[2]}: the test extra pins CMake 4")
    return cmake


def configure(tmp_path: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    source, build = tmp_path / "src", tmp_path / "build"
    source.mkdir(exist_ok=True)
    (source / "CMakeLists.txt").write_text(f"{GLOO_FIRST_LINE}\nproject(gloo_like NONE)\n")
    shutil.rmtree(build, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "CMAKE_POLICY_VERSION_MINIMUM"}
    return subprocess.run(
        [cmake_4(), "-S", str(source), "-B", str(build)],
        env={**env, **extra_env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_cmake_4_refuses_gloos_minimum_without_the_roles_environment(tmp_path: Path) -> None:
    refused = configure(tmp_path, {})
    assert refused.returncode != 0
    assert "Compatibility with CMake < 3.5 has been removed" in refused.stderr


def test_the_roles_build_environment_lets_cmake_4_configure_it(tmp_path: Path) -> None:
    env = role_build_env()
    assert env.get("CMAKE_POLICY_VERSION_MINIMUM") == "3.5"
    configured = configure(tmp_path, env)
    assert configured.returncode == 0, configured.stderr

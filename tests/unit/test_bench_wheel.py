"""roles/python_env/files/bench_wheel.py: the wheel python_env ships, built from this checkout.

Real builds (pip wheel with this interpreter's setuptools, offline): the same sources give the
same bytes whatever their mtimes and modes, the wheel holds the checkout's modules and nothing a
stale build tree or a cache left, and the checkout itself is left untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "python_env" / "files" / "bench_wheel.py"
spec = importlib.util.spec_from_file_location("bench_wheel", SCRIPT)
assert spec and spec.loader
bench_wheel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench_wheel)


def checkout_modules() -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "bench").rglob("*.py")
        if "__pycache__" not in p.parts
    )


def copy_of_checkout(dest: Path) -> Path:
    """The files a build reads, as a fresh clone would have them."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "bench", dest / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def build(checkout: Path, out: Path) -> dict:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(checkout), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    checkout = copy_of_checkout(tmp_path_factory.mktemp("checkout"))
    return build(checkout, tmp_path_factory.mktemp("out"))


def test_wheel_holds_the_checkouts_modules_and_metadata(built) -> None:
    result = built
    assert result["name"] == "gpurig_bench-0.1.0-py3-none-any.whl"
    # this interpreter has pyproject.toml's build requirements: built offline
    assert (result["isolated"], result["reason"]) == (False, "")
    with zipfile.ZipFile(result["wheel"]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read("gpurig_bench-0.1.0.dist-info/METADATA").decode()
        stamps = {info.date_time for info in wheel.infolist()}
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in wheel.infolist()}
    assert sorted(n for n in names if n.startswith("bench/")) == checkout_modules()
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]
    assert "Name: gpurig-bench" in metadata.splitlines()
    # every entry stamped 1980-01-01 (SOURCE_DATE_EPOCH), every file 0644 whatever the checkout's
    assert stamps == {(1980, 1, 1, 0, 0, 0)}
    assert {modes[n] for n in names if n.startswith("bench/")} == {0o644}


def test_same_sources_give_the_same_wheel(built, tmp_path: Path) -> None:
    first = built
    # another clone: other mtimes, group-writable files (umask 002), a stale build tree with a
    # module deleted since and caches: none of it reaches the wheel
    (tmp_path / "other").mkdir()
    other = copy_of_checkout(tmp_path / "other")
    for path in other.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
        if path.is_file():
            path.chmod(0o664)
    stale = other / "build" / "lib" / "bench" / "gone.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("raise SystemExit('deleted upstream')\n")
    (other / "bench" / "__pycache__").mkdir()
    (other / "bench" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    second = build(other, tmp_path / "out")
    assert second["sha256"] == first["sha256"]
    # ... and the build wrote nothing into the checkout it was given
    assert sorted(p.name for p in other.iterdir()) == [
        "LICENSE",
        "README.md",
        "bench",
        "build",
        "pyproject.toml",
    ]
    assert not list(other.glob("*.egg-info"))


def test_a_changed_module_changes_the_wheel(built, tmp_path: Path) -> None:
    first = built
    (tmp_path / "other").mkdir()
    other = copy_of_checkout(tmp_path / "other")
    with (other / "bench" / "paths.py").open("a") as module:
        module.write("# edited\n")
    assert build(other, tmp_path / "out")["sha256"] != first["sha256"]


def test_a_directory_without_pyproject_toml_says_which_variable_to_set(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert (
        f"python_env: {tmp_path} holds no pyproject.toml; set python_env_bench_src" in done.stderr
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("installed", "unmet"),
    [
        ({"setuptools": "84.2.1"}, []),
        ({"setuptools": "77.0.0"}, []),
        ({"setuptools": "76.1.0"}, ["setuptools>=77"]),
        ({}, ["setuptools>=77"]),
    ],
    ids=["new", "oldest-accepted", "too-old", "absent"],
)
def test_a_python_without_the_build_requirements_builds_isolated(installed, unmet) -> None:
    assert bench_wheel.unmet_build_requirements(["setuptools>=77"], installed.get) == unmet
    argv = bench_wheel.pip_wheel_argv(Path("src"), Path("dist"), isolated=bool(unmet))
    offline = {"--no-build-isolation", "--check-build-dependencies", "--no-index"}
    assert offline.isdisjoint(argv) if unmet else offline <= set(argv)

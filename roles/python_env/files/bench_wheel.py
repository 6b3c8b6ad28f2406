"""Build the bench's wheel from a project checkout: the same sources give the same bytes.

    python bench_wheel.py CHECKOUT OUTDIR

roles/python_env/tasks/bench.yml runs it once on the controller, with ansible-playbook's Python,
and prints its one line of JSON: {"wheel": path, "name": file name, "sha256": hex, "isolated":
bool, "reason": why the build was isolated, or ""}. The wheel's sha256 is the install stamp on the
hosts, so a rebuild of unchanged sources must not change it:

- Only the sources are built, copied into OUTDIR/src: pyproject.toml, its readme and license
  files, and the packages it names, without caches. setuptools writes build/ and *.egg-info into
  the tree it builds, and copies a build/lib it finds there into the wheel; a copy keeps the
  checkout clean and a module deleted from it out of the wheel.
- Every copied file gets mode 0644: the wheel records each file's mode, which would otherwise
  follow the umask of whoever checked the sources out.
- SOURCE_DATE_EPOCH is the zip format's earliest time: wheel's WheelFile stamps every entry with
  it instead of the build time (pypa/wheel#248 quoting wheel.wheelfile.get_zipinfo_datetime,
  which also raises earlier values to 1980-01-01; setuptools' bdist_wheel writes through that
  WheelFile; checked 2026-11-25).

Offline when it can: when this Python already has the build requirements of pyproject.toml
(setuptools>=77), pip builds with them (--no-build-isolation --no-index, and
--check-build-dependencies, pip >= 22.1, pypa/pip#11117; checked 2026-11-25); otherwise pip
builds in an isolated environment, which fetches them from the package index, and says why.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

# 1980-01-01T00:00:00Z, the earliest time a zip entry can carry (python-stripzip's README builds
# reproducible wheels with SOURCE_DATE_EPOCH=315532800; checked 2026-11-25).
ZIP_EPOCH = 315532800
CACHES = ("__pycache__", "*.pyc", "*.pyo")


def project_sources(checkout: Path) -> list[Path]:
    """The files and package directories pyproject.toml names, relative to the checkout."""
    pyproject = tomllib.loads((checkout / "pyproject.toml").read_text())
    project = pyproject["project"]
    readme = project.get("readme")
    files = [readme if isinstance(readme, str) else (readme or {}).get("file")]
    licenses = [p for g in project.get("license-files", []) for p in sorted(checkout.glob(g))]
    find = pyproject.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {})
    patterns = find.get("include", ["*"])
    packages = sorted(
        d.name
        for d in checkout.iterdir()
        if (d / "__init__.py").is_file() and any(fnmatch.fnmatch(d.name, p) for p in patterns)
    )
    named = ["pyproject.toml", *filter(None, files), *packages]
    return [Path(n) for n in named] + [p.relative_to(checkout) for p in licenses]


def copy_sources(checkout: Path, dest: Path) -> None:
    """The project's sources, without caches, every file 0644 and directory 0755."""
    for relative in project_sources(checkout):
        source, target = checkout / relative, dest / relative
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*CACHES))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    for root, dirs, files in os.walk(dest):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


def unmet_build_requirements(
    requires: list[str], version_of: Callable[[str], str | None]
) -> list[str]:
    """The build requirements this Python does not satisfy (all of them when it cannot tell)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        return list(requires)
    unmet = []
    for text in requires:
        requirement = Requirement(text)
        have = version_of(requirement.name)
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            unmet.append(text)
    return unmet


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def pip_wheel_argv(source: Path, wheel_dir: Path, isolated: bool) -> list[str]:
    """The one pip command that builds the wheel; offline unless the build is isolated."""
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check"]
    if not isolated:
        argv += ["--no-build-isolation", "--check-build-dependencies", "--no-index"]
    return [*argv, "--wheel-dir", str(wheel_dir), str(source)]


def build(checkout: Path, outdir: Path) -> dict[str, object]:
    if not (checkout / "pyproject.toml").is_file():
        raise SystemExit(
            f"python_env: {checkout} holds no pyproject.toml; set python_env_bench_src to the "
            "project checkout, or python_env_bench_requirement to a pip requirement."
        )
    source, wheel_dir = outdir / "src", outdir / "dist"
    copy_sources(checkout, source)
    requires = tomllib.loads((source / "pyproject.toml").read_text())["build-system"]["requires"]
    unmet = unmet_build_requirements(requires, installed_version)
    reason = (
        f"{sys.executable} lacks {', '.join(unmet)}: pip fetched it into an isolated build "
        "(install it next to ansible-core to build offline)"
        if unmet
        else ""
    )
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(ZIP_EPOCH)}
    done = subprocess.run(
        pip_wheel_argv(source, wheel_dir, isolated=bool(unmet)),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip wheel failed (rc {done.returncode}):\n{done.stdout}{done.stderr}")
    (wheel,) = wheel_dir.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return {
        "wheel": str(wheel),
        "name": wheel.name,
        "sha256": digest,
        "isolated": bool(unmet),
        "reason": reason,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit("usage: bench_wheel.py CHECKOUT OUTDIR")
    print(json.dumps(build(Path(argv[0]), Path(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

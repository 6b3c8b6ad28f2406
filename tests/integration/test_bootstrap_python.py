"""scripts/bootstrap.sh where the only Python is older than requires-python.

Runs the quick start's first command in the Ubuntu 20.04 stand-in (tests/infra/images.sh) after
making Ubuntu 20.04's interpreter, CPython 3.8, its only `python3` (the image's Debian python3.11
is removed from PATH). Bootstrap must fail its Python check, fetch the Miniforge installer, check
its sha256, run it in batch mode into .cache/miniforge and build .venv from that Python: the real
path, with only the installer's source replaced (GPURIG_MINIFORGE_URL/_SHA256, file://). It
stops once .venv exists (GPURIG_BOOTSTRAP_STOP_AFTER=venv): installing torch into the
container would add minutes and no coverage of this path.

The installer is the conda role's TEST FIXTURE (molecule/conda/files/miniforge-installer-
fixture.sh, Miniforge's batch-mode command line) whose base environment is a real CPython >= 3.11
from this machine, mounted read-only where no PATH lookup finds it. Not covered: Miniforge's real
download from GitHub (unreachable here), conda-forge's own Python build, and the `conda create`
fallback for a base Python older than the floor (the fixture has no conda).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration_support import REPO, unavailable

IMAGE = "local/gpurig-ubuntu2004-standin:latest"
PY38 = "/root/.pyenv/versions/3.8.18"  # where tests/infra/images.sh puts Ubuntu 20.04's CPython
FIXTURE = Path(__file__).parents[2] / "molecule/conda/files/miniforge-installer-fixture.sh"
FLOOR = tuple(
    int(part)
    for part in re.search(
        r'^requires-python = ">=(\d+)\.(\d+)"', (REPO / "pyproject.toml").read_text(), re.M
    ).groups()
)


def docker(*args: str, timeout_s: float = 120, stdin: bytes | None = None):
    return subprocess.run(["docker", *args], capture_output=True, timeout=timeout_s, input=stdin)


def fixture_python() -> Path:
    """A self-contained CPython >= the floor on this machine, to mount at the same path (pyenv's
    builds link libpython by absolute path): the one this test runs on, when it is not /usr's."""
    home = Path(sys.base_prefix)
    binary = home / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if sys.version_info[:2] < FLOOR or home == Path("/usr") or not binary.exists():
        unavailable(f"no self-contained Python >= {FLOOR} to stand in for Miniforge's ({home})")
    return binary


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(container, fixture python): the 20.04 stand-in with python3 = 3.8 only, and the fixture
    installer under /fixture."""
    if shutil.which("docker") is None or docker("info").returncode != 0:
        unavailable("the Docker daemon does not answer (tests/infra/docker.sh start)")
    if docker("image", "inspect", IMAGE).returncode != 0:
        unavailable(f"no {IMAGE} image (tests/infra/images.sh builds it)")
    python = fixture_python()
    served = tmp_path_factory.mktemp("installer")
    shutil.copy(FIXTURE, served / "Miniforge3-fixture-Linux-x86_64.sh")
    name = f"gpurig-bootstrap-{uuid.uuid4().hex[:8]}"
    run = docker(
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "-v",
        f"{python.parent.parent}:{python.parent.parent}:ro",
        "-v",
        f"{served}:/fixture:ro",
        IMAGE,
        "sleep",
        "infinity",
    )
    assert run.returncode == 0, run.stderr.decode()
    try:
        # Ubuntu 20.04's python3 is 3.8: make the stand-in's the same and hide Debian's 3.11.
        sh(name, "rm -f /usr/bin/python3 /usr/bin/python3.11")
        sh(name, f"ln -s {PY38}/bin/python3.8 /usr/bin/python3")
        found = sh(name, "python3 -V; compgen -c python | sort -u | tr '\\n' ' '")
        assert found.startswith("Python 3.8."), found
        assert re.search(r"python3\.(9|1\d)", found) is None, found
        yield name, python
    finally:
        docker("rm", "-f", name)


def sh(container: str, script: str) -> str:
    done = docker("exec", container, "bash", "-c", script)
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out
    return out


def copy_repo(container: str, dest: str) -> None:
    """This working tree (tracked and new files; not .venv, .cache, .work) at DEST."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    tar = subprocess.run(
        ["tar", "--null", "-T", "-", "-c"], cwd=REPO, input=files, capture_output=True, check=True
    ).stdout
    unpack = docker(
        "exec", "-i", container, "sh", "-c", f"mkdir -p {dest} && tar -x -C {dest}", stdin=tar
    )
    assert unpack.returncode == 0, unpack.stderr.decode()


def bootstrap(container: str, repo: str, sha256: str, python: Path) -> subprocess.CompletedProcess:
    env = {
        "GPURIG_MINIFORGE_URL": "file:///fixture/Miniforge3-fixture-Linux-x86_64.sh",
        "GPURIG_MINIFORGE_SHA256": sha256,
        "GPURIG_TEST_FIXTURE_PYTHON": str(python),
        "GPURIG_BOOTSTRAP_STOP_AFTER": "venv",
    }
    args = [f"--env={k}={v}" for k, v in env.items()]
    return docker("exec", *args, container, f"{repo}/scripts/bootstrap.sh", timeout_s=900)


def output(done: subprocess.CompletedProcess) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout.decode() + done.stderr.decode())


def test_wrong_sha256_is_refused_before_the_installer_runs(standin: tuple[str, Path]) -> None:
    container, python = standin
    copy_repo(container, "/refused")
    wrong = hashlib.sha256(b"not the installer").hexdigest()
    done = bootstrap(container, "/refused", wrong, python)
    log = output(done)
    assert done.returncode != 0, log
    assert "python3: Python 3.8." in log, log
    assert f"expected {wrong} (GPURIG_MINIFORGE_SHA256); it was not run" in log, log
    # The fixture creates the prefix on its first action: no prefix means it never ran.
    left = sh(container, "ls -d /refused/.cache/miniforge /refused/.venv 2>/dev/null || true")
    assert left.strip() == "", left


def test_bootstrap_builds_the_venv_from_miniforge_python(standin: tuple[str, Path]) -> None:
    container, python = standin
    copy_repo(container, "/src")
    sha256 = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    done = bootstrap(container, "/src", sha256, python)
    log = output(done)
    assert done.returncode == 0, log
    assert "python3: Python 3.8." in log, log  # the check failed on the system Python ...
    assert "installing Miniforge" in log, log  # ... and the installer path ran
    assert "using /src/.cache/miniforge/bin/python3 (Python 3." in log, log

    venv = sh(
        container,
        "cat /src/.venv/pyvenv.cfg; /src/.venv/bin/python -c "
        "'import sys; print(\"version_info\", *sys.version_info[:2])'",
    )
    assert "home = /src/.cache/miniforge/bin" in venv, venv
    major, minor = map(int, re.search(r"version_info (\d+) (\d+)", venv).groups())
    assert (major, minor) >= FLOOR, venv
    runs = sh(container, "cat /src/.cache/miniforge/.fixture-installer-runs")
    assert runs.splitlines() == ["run: -b -p /src/.cache/miniforge"], runs

    # A second run finds Miniforge recorded and the venv in place: nothing is installed again.
    again = bootstrap(container, "/src", sha256, python)
    assert again.returncode == 0, output(again)
    assert "installing Miniforge" not in output(again)
    assert sh(container, "cat /src/.cache/miniforge/.fixture-installer-runs") == runs


def test_a_venv_from_an_older_python_is_rebuilt(standin: tuple[str, Path]) -> None:
    """A .venv an earlier bootstrap made from the system's 3.8 is made again, not reused."""
    container, python = standin
    copy_repo(container, "/stale")
    sh(container, "python3 -m venv --without-pip /stale/.venv")
    sha256 = hashlib.sha256(FIXTURE.read_bytes()).hexdigest()
    done = bootstrap(container, "/stale", sha256, python)
    log = output(done)
    assert done.returncode == 0, log
    assert "recreating .venv: it holds Python 3.8" in log, log
    venv = sh(container, "cat /stale/.venv/pyvenv.cfg")
    assert "home = /stale/.cache/miniforge/bin" in venv, venv

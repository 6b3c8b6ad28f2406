"""The container route: `python -m bench.scaling --container host,IMAGE` with real containers.

The image is built here, without a registry: the project's debootstrapped Debian 12 base image
(tests/infra/images.sh) with CPU torch, torchvision and the cached Horovod wheel installed from
the local wheelhouse (tests/infra/wheelhouse.sh; the cached wheel from scripts/bootstrap.sh),
using this interpreter's pip mounted in (Debian's minimal image has none). Its tag is derived
from what goes in, so a machine builds it once. Every rank then runs in it, and the rows must
show that the ranks themselves saw another interpreter, torch and mount namespace.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pip
import pytest
from integration_support import REPO, TINY, unavailable

from bench.launchers.docker import LABEL
from bench.rank.faults import ENV_VAR as FAULT_VAR
from bench.results import ResultStore
from bench.shared import wire
from bench.spec import container_label

pytestmark = pytest.mark.slow

BASE_IMAGE = "local/gpurig-debian:12"
TORCH = "torch==2.13.0+cpu"
REQUIREMENTS = (TORCH, "torchvision==0.28.0")
CACHE = Path(os.environ.get("GPURIG_CACHE", Path.home() / ".cache" / "gpurig"))
# dockerd on the test machines lacks CAP_SYS_RESOURCE, so it cannot raise memlock (the
# default asks for unlimited): the stack limit alone, as --container-ulimit allows.
ULIMITS = ("--container-ulimit", "stack=67108864")


def docker(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)


def wheelhouse() -> Path:
    for directory in (REPO / ".work" / "www" / "wheels", CACHE / "wheelhouse"):
        if list(directory.glob("torch-2.13.0+cpu-cp311-*.whl")):
            return directory
    unavailable("no wheelhouse with torch 2.13.0+cpu for cp311 (run tests/infra/wheelhouse.sh)")
    raise AssertionError  # unreachable: unavailable() skips or fails


def horovod_wheel() -> Path | None:
    """Horovod built against this torch for CPython 3.11 (scripts/bootstrap.sh caches it)."""
    found = sorted(CACHE.glob("horovod-wheels/*torch-2.13.0+cpu_py3.11*/horovod-*-cp311-*.whl"))
    return found[-1] if found else None


def build_image() -> tuple[str, bool]:
    """(tag, whether it has Horovod): the test image, built unless this machine has it."""
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed")
    if docker("info").returncode != 0:
        unavailable("the Docker daemon does not answer (tests/infra/docker.sh start)")
    base = docker("image", "inspect", "--format", "{{.Id}}", BASE_IMAGE)
    if base.returncode != 0:
        unavailable(f"no {BASE_IMAGE} image (tests/infra/images.sh builds it)")
    wheels, horovod = wheelhouse(), horovod_wheel()
    pip_dir = Path(pip.__file__).parent
    packages = [*REQUIREMENTS, *([f"/horovod/{horovod.name}"] if horovod else [])]
    # pip from this interpreter's environment, only for the build (not in the image's ENV)
    install = [
        "env",
        "PYTHONPATH=/opt/pip",
        "python3",
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        "/wheels",
        "--break-system-packages",
        "--no-cache-dir",
        "--root-user-action=ignore",
        "--disable-pip-version-check",
        "-q",
        *packages,
    ]
    files = sorted(f"{p.name}:{p.stat().st_size}" for p in wheels.glob("*.whl"))
    key = hashlib.sha256(
        json.dumps([base.stdout.strip(), pip.__version__, install, files]).encode()
    ).hexdigest()[:16]
    tag = f"local/gpurig-bench-test:{key}"
    if docker("image", "inspect", tag).returncode == 0:
        return tag, horovod is not None
    name = f"gsb-build-{uuid.uuid4().hex[:8]}"
    mounts = ["-v", f"{wheels}:/wheels:ro", "-v", f"{pip_dir}:/opt/pip/pip:ro"]
    if horovod:
        mounts += ["-v", f"{horovod.parent}:/horovod:ro"]
    try:
        done = docker("run", "--name", name, *mounts, BASE_IMAGE, *install, timeout_s=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        done = docker(
            "commit",
            "--change",
            'CMD ["python3"]',
            "--change",
            "LABEL org.gpurig.test=bench-container-route",
            name,
            tag,
        )
        assert done.returncode == 0, done.stderr
    finally:
        docker("rm", "--force", name)
    # earlier builds of this test image (other wheels, another base) are not needed again
    repository = tag.split(":")[0]
    for old in docker("image", "ls", repository, "--format", "{{.Tag}}").stdout.split():
        if old != tag.split(":")[1]:
            docker("image", "rm", f"{repository}:{old}")
    return tag, horovod is not None


@pytest.fixture(scope="module")
def image() -> tuple[str, bool]:
    started = time.monotonic()
    built = build_image()
    print(f"\ntest image {built[0]} ready in {time.monotonic() - started:.1f} s")
    return built


def sweep(
    out: Path, *args: str, fault: str | None = None
) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {k: v for k, v in os.environ.items() if k != FAULT_VAR}
    if fault:
        env[FAULT_VAR] = fault
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scaling",
            *TINY,
            "--out",
            str(out),
            "--device",
            "cpu",
            "--repeats",
            "1",
            "--no-probe",
            *ULIMITS,
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    dirs = [d for d in out.iterdir() if d.is_dir()] if out.exists() else []
    assert len(dirs) == 1, done.stderr[-3000:]
    return done, dirs[0]


def by_id(directory: Path) -> dict[str, dict]:
    frame = pd.read_parquet(directory / "runs.parquet")
    return {r["run_id"]: r for r in frame.to_dict(orient="records")}


def rank_runtime(directory: Path, run_id: str) -> list[dict[str, str]]:
    """What each rank reported about where it ran (rank 0's report in the launch's log)."""
    report = wire.decode(run_id, (directory / "logs" / f"{run_id}.log").read_text())
    assert report is not None
    return [r["runtime"] for r in report["ranks"]]


def image_id(tag: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


def test_host_and_image_runs_side_by_side(tmp_path: Path, image: tuple[str, bool]) -> None:
    tag, _ = image
    done, d = sweep(tmp_path, "--launchers", "ddp", "--gpus", "1,2", "--container", f"host,{tag}")
    assert done.returncode == 0, done.stderr[-3000:]
    runs = by_id(d)
    inside = f"fp32-nchw@{container_label(tag)}"
    assert set(runs) == {
        "ddp-n1-fp32-nchw-r0",
        "ddp-n2-fp32-nchw-r0",
        f"ddp-n1-{inside}-r0",
        f"ddp-n2-{inside}-r0",
    }
    own_mounts = os.readlink("/proc/self/ns/mnt")
    for run_id, run in runs.items():
        assert run["status"] == "ok", run["error"]
        assert run["rank_torch"] == "2.13.0+cpu"
        ranks = rank_runtime(d, run_id)
        assert len(ranks) == run["gpus"]
        if run["container"] == "host":
            assert run["variant"] == "fp32-nchw" and run["container_digest"] == ""
            assert run["rank_python"] == sys.executable
            assert {r["mount_namespace"] for r in ranks} == {own_mounts}
        else:
            assert run["container"] == tag and run["variant"] == inside
            # a locally built image has no registry digest: its image ID is recorded
            assert run["container_digest"] == image_id(tag)
            # seen by the ranks: the image's interpreter and torch, another mount namespace
            assert run["rank_python"] == "/usr/bin/python3"
            for rank in ranks:
                assert rank["torch_path"] == "/usr/local/lib/python3.11/dist-packages/torch"
                assert rank["mount_namespace"] not in ("", own_mounts)
            header = (d / "logs" / f"{run_id}.log").read_text().splitlines()[0]
            assert header.startswith("$ docker run --rm --pull never --init --name gsb-")
    system = ResultStore(d).read_meta()["system"]["containers"][tag]
    assert system["torch"] == "2.13.0+cpu" and system["executable"] == "/usr/bin/python3"
    assert system["image_id"] == system["digest"] == image_id(tag)
    report = (d / "report.md").read_text()
    assert "| ddp | fp32-nchw | 2 |" in report and f"| ddp | {inside} | 2 |" in report
    assert "## Host and containers" in report and system["digest"] in report


def test_horovod_runs_in_the_image(tmp_path: Path, image: tuple[str, bool]) -> None:
    tag, horovod = image
    if not horovod:
        unavailable("no cached Horovod wheel for torch 2.13.0+cpu, cp311 (scripts/bootstrap.sh)")
    done, d = sweep(tmp_path, "--launchers", "horovod", "--gpus", "2", "--container", tag)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = by_id(d).values()
    assert run["status"] == "ok", run["error"]
    assert (run["launcher"], run["backend"], run["gpus"]) == ("horovod", "gloo", 2)
    assert run["rank_python"] == "/usr/bin/python3"
    assert ResultStore(d).read_meta()["system"]["containers"][tag]["horovod"]


def test_a_timed_out_container_run_leaves_no_container(
    tmp_path: Path, image: tuple[str, bool]
) -> None:
    tag, _ = image
    done, d = sweep(
        tmp_path,
        "--launchers",
        "ddp",
        "--gpus",
        "2",
        "--container",
        tag,
        "--timeout",
        "25",
        fault="hang@0",
    )
    assert done.returncode == 1, done.stderr[-3000:]
    (run,) = by_id(d).values()
    assert run["status"] == "timeout", run["error"]
    # the stop policy's first signal reached torchrun inside the container (docker kill, init)
    log = (d / "logs" / f"{run['run_id']}.log").read_text()
    assert "Received 15 death signal" in log
    # neither the container nor the docker CLI that started it outlives the run
    name = log.split("--name ", 1)[1].split()[0]
    left = docker("ps", "--all", "--quiet", "--filter", f"label={LABEL}={run['run_id']}")
    assert left.returncode == 0 and left.stdout.strip() == ""
    assert docker("inspect", name).returncode != 0
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if name in read(p)]


def read(path: Path) -> str:
    try:
        return path.read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_an_image_that_is_not_here_is_refused_before_launch(
    tmp_path: Path, image: tuple[str, bool]
) -> None:
    missing = f"local/gpurig-bench-absent:{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scaling",
            *TINY,
            "--device",
            "cpu",
            "--out",
            str(tmp_path),
            "--container",
            f"host,{missing}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert f"image {missing!r} is not present locally" in done.stderr
    assert f"docker pull {missing}" in done.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())

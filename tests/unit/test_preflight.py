"""Bench input: --out, paths, ports, counts, conflicting flags and Slurm's tools are
checked before anything is created or launched; a --resume that cannot go on is refused before
torch is imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bench_builders import MODELS, cpu_machine
from test_results_store import sweep_with_rows
from test_scaling import REPO, heavy_modules_after

from bench import admission, machine, scaling, stages, sweep_lock
from bench.admission import request_problems
from bench.hosts import ClusterConfig
from bench.options import parse_request


def test_out_under_a_plain_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert admission.out_problem(str(tmp_path / "file")).endswith(
        "is a plain file, not a directory"
    )
    problem = admission.out_problem(str(tmp_path / "file" / "a" / "b"))
    assert f"lies under {tmp_path / 'file'}, which is a plain file" in problem
    assert admission.out_problem(str(tmp_path / "new" / "results")) == ""


def test_out_on_a_read_only_file_system_is_refused_before_launch(tmp_path: Path) -> None:
    # a read-only tmpfs in a mount namespace of its own (user namespace: no privileges needed)
    mount = tmp_path / "ro"
    mount.mkdir()
    code = (
        "import sys\nfrom bench import admission\n"
        f"print(admission.out_problem({str(mount / 'results')!r}))\n"
    )
    script = f'mount -t tmpfs -o ro tmpfs {mount} && exec {sys.executable} -c "$0"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "mount" in done.stderr + done.stdout:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert (
        done.stdout.strip() == f"--out {mount / 'results'}: {mount} is on a read-only file system"
    )


def cluster(**fields: object) -> ClusterConfig:
    grid: dict[str, object] = {"hosts": (("n1", 2),), "node_counts": (1,), "gpus_per_node": (2,)}
    return ClusterConfig(**{**grid, **fields})  # type: ignore[arg-type]


def test_ports_and_counts_are_range_checked() -> None:
    assert admission.cluster_problems(cluster(ssh_port=0, rdzv_port=70000)) == [
        "--ssh-port must be a port from 1 to 65535, got 0",
        "--rdzv-port must be a port from 1 to 65535, got 70000",
    ]
    assert admission.cluster_problems(cluster(ssh_port=22, rdzv_port=29400)) == []
    problems = admission.cluster_problems(cluster(gpus_per_node=(0, 2)))
    assert problems == ["--gpus-per-node must be >= 1, got 0,2"]


def fake_tools(directory: Path, *names: str) -> str:
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\nexit 0\n")
        (directory / name).chmod(0o755)
    return str(directory)


def test_slurm_tools_must_be_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", "srun"))
    slurm = cluster(slurm=True)
    assert admission.cluster_problems(slurm) == [
        "--slurm: scontrol not found on PATH: run the sweep inside a Slurm allocation (sbatch "
        "or salloc; load Slurm's module), or use --hosts"
    ]
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin", "scontrol"))
    assert admission.cluster_problems(slurm) == []


def test_conflicting_flags_are_refused() -> None:
    request = parse_request(
        ["--no-probe", "--probe-mb", "10", "--global-batch", "64", "--batch-size", "8"]
    )
    assert request_problems(request) == [
        "--global-batch with --batch-size: --global-batch fixes the images per step (strong "
        "scaling); --batch-size fixes them per GPU (weak scaling): give one",
        "--no-probe with --probe-mb: the probe is off, so its size and iterations would not be "
        "used",
    ]
    assert request_problems(parse_request(["--global-batch", "64", "--probe-mb", "10"])) == []


def test_seed_and_nccl_tests_path_are_checked(tmp_path: Path) -> None:
    assert request_problems(parse_request(["--seed", "-1"])) == ["--seed must be >= 0, got -1"]
    missing = str(tmp_path / "none")
    assert admission.check_values({"nccl_tests": missing}) == [
        f"--nccl-tests {missing}: no such file or directory ('off' skips nccl-tests)"
    ]
    assert (
        admission.check_values({"nccl_tests": "off"})
        == admission.check_values({"nccl_tests": ""})
        == []
    )


@pytest.fixture
def cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "local_environment", lambda **_: cpu_machine())
    monkeypatch.setattr(stages.models, "available_models", lambda: MODELS)
    monkeypatch.setattr(stages, "collect_system_info", lambda env: {"host": "vm"})


def test_slurm_without_its_tools_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], cpu: None
) -> None:
    monkeypatch.setenv("PATH", fake_tools(tmp_path / "bin") + os.pathsep + "/usr/bin:/bin")
    if shutil.which("srun") or shutil.which("scontrol"):
        pytest.skip("Slurm's tools are installed here")
    out = tmp_path / "results"
    assert scaling.main(["--slurm", "--nodes", "1", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--slurm: srun and scontrol not found on PATH" in err and "Traceback" not in err
    assert not out.exists()  # no sweep directory, no rows


# --- --resume refusals: before torch is imported --------------------------------------------------


def refused_resume(argv: list[str]) -> tuple[list[str], str]:
    done = heavy_modules_after(argv)
    status, heavy = done.stdout.strip().split(" ", 1)
    assert status == "2", done.stdout + done.stderr
    return json.loads(heavy.replace("'", '"')), done.stderr


def test_resume_refusals_come_before_torch_is_imported(tmp_path: Path) -> None:
    heavy, err = refused_resume(["--resume", str(tmp_path / "none")])
    assert "torch" not in heavy and "is not a directory" in err
    heavy, err = refused_resume(["--resume", str(tmp_path), "--gpus", "2"])
    assert "torch" not in heavy and "drop --gpus" in err
    heavy, err = refused_resume(["--resume", str(tmp_path)])  # nothing there
    assert "torch" not in heavy and "sweep.jsonl is missing: it is the only record" in err


def test_a_second_controller_is_refused_with_the_first_one_s_identity(tmp_path: Path) -> None:
    sweep_with_rows(tmp_path)
    holder = sweep_lock.acquire(tmp_path)  # this process plays the running controller
    try:
        heavy, err = refused_resume(["--resume", str(tmp_path)])
    finally:
        holder.release()
    assert "torch" not in heavy
    assert f"being run by another controller: pid {os.getpid()} on {holder.holder.host}" in err

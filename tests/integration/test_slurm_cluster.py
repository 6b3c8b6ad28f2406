"""The sweep through a real Slurm: slurmctld on this machine, slurmd in two namespace hosts.

tests/infra/netns.sh makes the hosts (gss1, gss2 on 10.213.1.0/24, their own subnet so this
module does not depend on test_multihost.py) and tests/infra/slurm.sh starts munge, slurmctld
(on the bridge address) and one slurmd per host with a minimal slurm.conf; both are torn down
afterwards. `python -m bench.scaling --slurm` then submits each configuration with sbatch --wait;
a controller killed with kill -9 leaves its job running, and --resume cancels it (issue 25).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from integration_support import INFRA, REPO, TINY, require_netns_hosts

from bench.launchers.slurm import parse_scontrol_record

SUBNET = "10.213.1"
PORT = 2214

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Two-node Slurm; yields (environment with SLURM_CONF, netns state directory)."""
    require_netns_hosts("network namespaces, sshd, slurmd and munged")
    base = tmp_path_factory.mktemp("slurm")
    env = {
        **os.environ,
        "GSB_NETNS_PREFIX": "gss",
        "GSB_NETNS_SUBNET": SUBNET,
        "GSB_NETNS_SSH_PORT": str(PORT),
        "GSB_NETNS_STATE": str(base / "netns"),
        "GSB_SLURM_STATE": str(base / "slurm"),
        "GSB_SLURM_PORT": "6927",
    }

    def infra(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(INFRA / script), *args], env=env, capture_output=True, text=True, timeout=300
        )

    infra("slurm.sh", "down")
    infra("netns.sh", "down")
    try:
        up = infra("netns.sh", "up", "2")
        assert up.returncode == 0, up.stderr
        up = infra("slurm.sh", "up", "netns")
        assert up.returncode == 0, up.stderr
        yield {**env, "SLURM_CONF": str(base / "slurm" / "slurm.conf")}, base / "netns"
    finally:
        infra("slurm.sh", "down")
        infra("netns.sh", "down")


def test_slurm_cluster_is_real(cluster) -> None:
    env, _ = cluster
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.stdout.split("\n")[:2] == ["gss1 idle", "gss2 idle"]


@pytest.mark.usefixtures("horovod")
def test_sweep_through_slurm_runs_ddp_and_horovod_on_two_nodes(cluster, tmp_path: Path) -> None:
    env, netns = cluster
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scaling",
            *TINY,
            "--out",
            str(tmp_path / "out"),
            "--slurm",
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--launchers",
            "ddp,horovod",
            "--repeats",
            "1",
            "--no-probe",
            "--timeout",
            "180",
            # horovodrun inside the job reaches the other node over ssh with the hosts' test key
            "--ssh-port",
            str(PORT),
            "--ssh-identity-file",
            str(netns / "id_ed25519"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (directory,) = [d for d in (tmp_path / "out").iterdir() if d.is_dir()]
    runs = {
        r["launcher"]: r for r in pd.read_parquet(directory / "runs.parquet").to_dict("records")
    }
    assert set(runs) == {"ddp", "horovod"}
    for launcher, run in runs.items():
        assert run["status"] == "ok", (launcher, run["error"])
        assert (run["nodes"], run["gpus_per_node"], run["gpus"]) == (2, 1, 2)
        # the hosts Slurm allocated, as the ranks reported them
        assert run["hosts"] == "gss1:1,gss2:1"
        assert run["interconnect"] == "tcp (gloo, eth0)"
        assert run["images"] == run["global_batch"] * 3 == 24
    scripts = sorted((directory / "slurm").glob("job-*.sh"))
    assert len(scripts) == 2
    assert all("#SBATCH --nodes=2" in s.read_text() for s in scripts)


def queue(env: dict[str, str]) -> dict[str, str]:
    """This user's queued jobs, job id -> comment, as the bench asks squeue for them."""
    done = subprocess.run(
        ["squeue", "--me", "--noheader", "--format=%i %k"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def job_state(env: dict[str, str], job_id: str) -> str:
    """Slurm's JobState for the job (kept MinJobAge=600 s after it ends)."""
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return parse_scontrol_record(done.stdout).get("JobState", done.stderr.strip())


def test_resume_cancels_the_job_a_killed_controller_left(cluster, tmp_path: Path) -> None:
    """kill -9 of the controller mid-job: sbatch --wait and its job live on (the job would run
    until its --time limit); --resume finds the job by its comment, cancels it, then runs the
    configuration again."""
    env, _ = cluster
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "bench.scaling",
        *TINY,
        "--out",
        str(out),
        "--slurm",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--launchers",
        "ddp",
        "--repeats",
        "1",
        "--no-probe",
        "--timeout",
        "300",
    ]
    # rank 0 hangs after warm-up: the job runs until stopped
    controller = subprocess.Popen(
        argv,
        env={**env, "BENCH_INJECT_FAULT": "hang@0"},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while not (jobs := queue(env)) and time.monotonic() < deadline:
            assert controller.poll() is None, "the controller ended before its job was queued"
            time.sleep(1)
        assert jobs, "no job was queued within 240 s"
        time.sleep(5)  # into the job's run
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    (directory,) = [d for d in out.iterdir() if d.is_dir()]
    comment = "gpustack-sweep:" + json.loads((directory / "sweep.json").read_text())["sweep_id"]
    ((job_id, job_comment),) = jobs.items()
    assert job_comment == comment
    time.sleep(3)
    assert job_id in queue(env)  # the controller is gone; its job is not
    assert job_state(env, job_id) == "RUNNING"

    resume = [sys.executable, "-m", "bench.scaling", "--resume", str(directory), "--no-progress"]
    done = subprocess.run(resume, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"cancelled 1 Slurm job(s) an earlier controller left ({comment}): {job_id}" in (
        done.stderr
    )
    assert job_id not in queue(env)
    # ended by the stop policy's SIGTERM to its batch script (Slurm records that as FAILED with
    # ExitCode 0:15), or cancelled after the grace period
    assert job_state(env, job_id) in ("FAILED", "CANCELLED")
    rows = json.loads((directory / "sweep.json").read_text())["runs"]
    assert [r["status"] for r in rows] == ["ok"]  # measured again by the resumed controller

"""The sweep through a real Slurm: slurmctld on this machine, slurmd in two namespace hosts.

tests/infra/netns.sh makes the hosts (gss1, gss2 on 10.213.1.0/24, their own subnet so this
module does not depend on test_multihost.py) and tests/infra/slurm.sh starts munge, slurmctld
(on the bridge address) and one slurmd per host with a minimal slurm.conf; both are torn down
afterwards. The sweep runs inside one allocation, as Slurm users run it: scripts/slurm-sweep.sh
through `sbatch --wait` (the batch script, and so the controller, runs on the first node), and
from an allocation held by salloc with the controller on this machine, where a controller
killed with kill -9 leaves its steps running and --resume stops them.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from integration_support import REPO, TINY, slurm_on_netns

from bench.results import ResultStore

SUBNET = "10.213.1"
PORT = 2214

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """Two-node Slurm; yields (environment with SLURM_CONF, netns state directory)."""
    base = tmp_path_factory.mktemp("slurm")
    with slurm_on_netns(base, "gss", SUBNET, PORT, 6927, hosts=2) as env:
        yield env, base


def slurm(env: dict[str, str], *argv: str, timeout: float = 60) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return done.stdout


def test_slurm_cluster_is_real(cluster) -> None:
    env, _ = cluster
    assert slurm(env, "sinfo", "-h", "-N", "-o", "%N %T").split("\n")[:2] == [
        "gss1 idle",
        "gss2 idle",
    ]


@pytest.mark.usefixtures("horovod", "tensorflow")
def test_sbatch_of_the_sweep_runs_ddp_horovod_and_tf_inside_one_allocation(
    cluster, tmp_path: Path
) -> None:
    env, base = cluster
    out = tmp_path / "out"
    log = tmp_path / "job.out"
    job = slurm(
        env,
        "sbatch",
        "--wait",
        "--parsable",
        "--nodes=2",
        f"--output={log}",
        str(REPO / "scripts" / "slurm-sweep.sh"),
        *TINY,
        "--model",
        "resnet50",  # the tf launcher's one model (keras.applications.ResNet50)
        "--out",
        str(out),
        # Two nodes only: each launcher's commands across the allocation. A one-node launch
        # under Slurm runs in the resume test below; one node's horovodrun and TensorFlow
        # worker in test_multihost.py; tests/unit/test_slurm.py places a launch on the first
        # nodes of a larger allocation.
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--launchers",
        "ddp,horovod,tf",
        "--repeats",
        "1",
        "--no-probe",
        "--timeout",
        "180",
        # horovodrun on the first node reaches the other over ssh with the hosts' test key
        "--ssh-port",
        str(PORT),
        "--ssh-identity-file",
        str(base / "netns" / "id_ed25519"),
        timeout=900,
    ).strip()
    text = log.read_text()
    assert f"bench: sweep {out}" in text, text[-4000:]
    (directory,) = [d for d in out.iterdir() if d.is_dir()]
    rows = pd.read_parquet(directory / "runs.parquet").to_dict("records")
    by_config = {(r["launcher"], r["nodes"]): r for r in rows}
    assert set(by_config) == {(launcher, 2) for launcher in ("ddp", "horovod", "tf")}, text
    for (launcher, nodes), run in by_config.items():
        assert run["status"] == "ok", (launcher, nodes, run["error"])
        # the allocation's nodes, as the ranks reported them
        assert run["hosts"] == "gss1:1,gss2:1"
        assert run["images"] == run["global_batch"] * 3
    assert by_config[("ddp", 2)]["interconnect"] == "tcp (gloo, eth0)"
    assert by_config[("horovod", 2)]["interconnect"] == "tcp (gloo, eth0)"
    # one TensorFlow worker per node as an srun step, TF_CONFIG naming both: the gRPC ring
    assert by_config[("tf", 2)]["backend"] == "ring"
    assert by_config[("tf", 2)]["interconnect"] == "tcp (grpc ring, eth0)"
    # one allocation for the whole sweep: the controller ran in it, on its first node
    meta = ResultStore(directory).read_meta()
    assert meta["system"]["nodes"][0]["host"] == "gss1"
    assert slurm(env, "scontrol", "show", "job", "-o", job).count("JobState=COMPLETED") == 1


def allocation(env: dict[str, str], nodes: int) -> tuple[subprocess.Popen, dict[str, str]]:
    """An allocation held by salloc (its command sleeps); the environment a process inside it
    has (SLURM_JOB_ID, SLURM_JOB_NODELIST, as salloc sets them for its command)."""
    holder = subprocess.Popen(
        ["salloc", f"--nodes={nodes}", "sh", "-c", "env; sleep 600"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert holder.stdout is not None
    inside: dict[str, str] = {}
    deadline = time.monotonic() + 120
    for line in holder.stdout:
        key, _, value = line.rstrip("\n").partition("=")
        if key in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
            inside[key] = value
        if len(inside) == 2 or time.monotonic() > deadline:
            break
    assert len(inside) == 2, "salloc granted no allocation"
    return holder, {**env, **inside}


def test_resume_in_the_allocation_stops_the_steps_a_killed_controller_left(
    cluster, tmp_path: Path
) -> None:
    """kill -9 of the controller mid-launch: its srun step and the ranks in it live on; --resume
    in the same allocation stops them through srun on each node, then runs the launch again."""
    env, _ = cluster
    holder, inside = allocation(env, 1)
    try:
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
        # rank 0 hangs after warm-up: the launch runs until stopped
        controller = subprocess.Popen(
            argv,
            env={**inside, "BENCH_INJECT_FAULT": "hang@0"},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 240
            while not list(out.glob("*/logs/*.nodes/node0-gss1.log")):
                assert controller.poll() is None, "the controller ended before its launch began"
                assert time.monotonic() < deadline, "no launch began within 240 s"
                time.sleep(1)
            time.sleep(8)  # into the ranks' run
        finally:
            controller.send_signal(signal.SIGKILL)
            controller.wait(timeout=30)
        steps = slurm(inside, "squeue", "--steps", "--noheader", "--format=%i %N")
        assert f"{inside['SLURM_JOB_ID']}." in steps  # the killed controller's step lives on
        (directory,) = [d for d in out.iterdir() if d.is_dir()]
        resume = [sys.executable, "-m", "bench.scaling", "--resume", str(directory)]
        done = subprocess.run(
            [*resume, "--no-progress"],
            env=inside,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert "gss1: an earlier controller left processes of this sweep there:" in done.stderr
        rows = ResultStore(directory).runs.rows()
        assert [r.status for r in rows] == ["ok"]  # measured again by the resumed controller
        assert rows[0].hosts == "gss1:1"
    finally:
        holder.kill()
        holder.wait(timeout=30)
        subprocess.run(["scancel", inside.get("SLURM_JOB_ID", "0")], env=env, timeout=30)

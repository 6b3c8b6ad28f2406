"""The sweep through a real Slurm: slurmctld on this machine, slurmd in two namespace hosts.

tests/infra/netns.sh makes the hosts (gss1, gss2 on 10.213.1.0/24, their own subnet so this
module does not depend on test_multihost.py) and tests/infra/slurm.sh starts munge, slurmctld
(on the bridge address) and one slurmd per host with a minimal slurm.conf; both are torn down
afterwards. `python -m bench.scaling --slurm` then submits each configuration with sbatch --wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from integration_support import INFRA, REPO, TINY, require_netns_hosts

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
        return subprocess.run([str(INFRA / script), *args], env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip

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
    done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.stdout.split("\n")[:2] == ["gss1 idle", "gss2 idle"]


@pytest.mark.usefixtures("horovod")
def test_sweep_through_slurm_runs_ddp_and_horovod_on_two_nodes(cluster, tmp_path: Path) -> None:
    env, netns = cluster
    done = subprocess.run(
        [sys.executable, "-m", "bench.scaling", *TINY, "--out", str(tmp_path / "out"),
         "--slurm", "--nodes", "2", "--gpus-per-node", "1", "--launchers", "ddp,horovod",
         "--repeats", "1", "--no-probe", "--timeout", "180",
         # horovodrun inside the job reaches the other node over ssh with the hosts' test key
         "--ssh-port", str(PORT), "--ssh-identity-file", str(netns / "id_ed25519")],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO,
    )  # fmt: skip
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

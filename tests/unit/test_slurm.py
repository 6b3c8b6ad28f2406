"""--slurm without a cluster: the sweep runs inside one allocation, and its site runs each node's
command as an srun step there.

Stand-ins for Slurm's `srun` and `scontrol` sit on PATH. They take exactly the options the bench
passes and answer in the real tools' format (srun(1) and scontrol(1) of Slurm 22.05.8, Debian
12's slurm-client, checked 2026-11-25): `scontrol show hostnames LIST` prints one node name per
line; srun runs the command with SLURMD_NODENAME set, as slurmd does, and its exit status is the
task's. tests/integration/test_slurm_cluster.py runs the same sweep on a real slurmctld/slurmd.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine

from bench.hosts import ClusterConfig
from bench.launchers import RemoteError, launch_of
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.sites import (
    NoAllocationError,
    SlurmSite,
    check_reachable,
    run_on_host,
    site_for,
    slurm_allocation,
)
from bench.machine import NodeInfo
from bench.plan import plan_sweep

STANDIN_SCONTROL = """#!/bin/sh
[ "$1 $2" = "show hostnames" ] || exit 2
[ "$3" = "node[A-C]" ] && printf 'nodeA\\nnodeB\\nnodeC\\n' && exit 0
echo "scontrol: error: Invalid hostlist: $3" >&2; exit 1
"""
# Refuses any option the bench does not pass, and a step outside the job or on two nodes.
STANDIN_SRUN = """#!/bin/sh
node=""
while [ "${1#-}" != "$1" ]; do
  case "$1" in
    --jobid=77|--nodes=1|--ntasks=1|--overlap|--quiet) ;;
    --nodelist=*) node="${1#--nodelist=}" ;;
    *) echo "srun: unexpected option $1" >&2; exit 2 ;;
  esac
  shift
done
case "$node" in nodeA|nodeB|nodeC) ;; *) echo "srun: error: invalid node $node" >&2; exit 1 ;; esac
SLURMD_NODENAME=$node exec "$@"
"""
ALLOCATION = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node[A-C]"}


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """srun and scontrol on PATH; returns the environment of a process in allocation 77."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("scontrol", STANDIN_SCONTROL), ("srun", STANDIN_SRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return {**os.environ, **ALLOCATION}


def slurm_cluster(**fields: object) -> ClusterConfig:
    values: dict[str, object] = {
        "hosts": (),
        "slurm": True,
        "node_counts": (1, 2),
        "gpus_per_node": (2,),
        "remote_python": "/env/bin/python",
        "remote_workdir": "/srv/bench",
        **fields,
    }
    return ClusterConfig(**values)  # type: ignore[arg-type]


def test_outside_an_allocation_slurm_is_refused_with_the_way_in() -> None:
    with pytest.raises(NoAllocationError) as refused:
        slurm_allocation({})
    assert "sbatch" in str(refused.value) and "salloc --nodes=N" in str(refused.value)
    with pytest.raises(NoAllocationError):
        site_for(slurm_cluster(), {"SLURM_JOB_NODELIST": "n1"})  # no job id


def test_the_nodes_come_from_the_allocation_in_slurms_order(standins: dict[str, str]) -> None:
    assert slurm_allocation(standins) == ("77", ["nodeA", "nodeB", "nodeC"])
    with pytest.raises(NoAllocationError, match="Invalid hostlist"):
        slurm_allocation({**standins, "SLURM_JOB_NODELIST": "bad["})


def test_each_command_is_an_overlapping_srun_step_on_its_node(standins: dict[str, str]) -> None:
    site, hosts = site_for(slurm_cluster(), standins)
    assert site == SlurmSite("77") and hosts == ["nodeA", "nodeB", "nodeC"]
    assert site.argv("nodeB", "echo hi") == [
        "srun",
        "--jobid=77",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=nodeB",
        "--overlap",
        "--quiet",
        "sh",
        "-c",
        "echo hi",
    ]
    done = run_on_host("nodeB", 'echo "on $SLURMD_NODENAME"; exit 3', site, 30)
    assert (done.returncode, done.stdout) == (3, "on nodeB\n")
    check_reachable(["nodeA", "nodeC"], site)
    with pytest.raises(RemoteError, match=r"1 of 2 host\(s\) through srun:\n  nodeZ: srun: error"):
        check_reachable(["nodeA", "nodeZ"], site)
    with pytest.raises(ValueError, match="not a Slurm job id"):
        SlurmSite("77; rm -rf /")


def surveyed(launcher: ClusterLauncher) -> ClusterLauncher:
    launcher.infos = {
        h: NodeInfo(h, h, "3.11", torch="2.13.0", address=f"10.0.0.{i}", interface="eth0")
        for i, h in enumerate(launcher.hosts, 1)
    }
    return launcher


def test_each_launch_runs_on_the_first_nodes_of_the_allocation(standins: dict[str, str]) -> None:
    launcher = surveyed(ClusterLauncher(slurm_cluster(), environ=standins))
    assert launcher.hosts == ["nodeA", "nodeB", "nodeC"]
    launcher.check(["ddp"], "cpu")
    config = config_for(["--launchers", "ddp"], cpu_machine())
    config = dataclasses.replace(config, cluster=launcher.cluster)
    two_nodes = plan_sweep(config, "s", (), 2)[-1]
    assert two_nodes.hosts == "slurm-node1:2,slurm-node2:2"  # planned on stand-ins
    launch = launcher.placed(launch_of(two_nodes))
    assert [(n.host, n.slots) for n in launch.placement] == [("nodeA", 2), ("nodeB", 2)]
    commands = launcher.commands(launch, "gsb-s1")
    assert [c.host for c in commands] == ["nodeA", "nodeB"]
    assert "--rdzv-endpoint=nodeA:29400" in commands[1].argv  # the first node hosts it
    too_many = surveyed(ClusterLauncher(slurm_cluster(node_counts=(4,)), environ=standins))
    with pytest.raises(RemoteError, match=r"--nodes 4: the allocation \(job 77\) has 3 node"):
        too_many.check(["ddp"], "cpu")

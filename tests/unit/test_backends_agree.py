"""The local and multi-node backends turn the same spec into the same torchrun/horovodrun argv:
each is exactly what the one builder returns, given only the values that backend alone knows
(the rendezvous endpoint, the node's address, where rank logs go). Under --slurm the multi-node
backend builds the same commands as over ssh; only the site that runs them differs
(tests/unit/test_slurm.py)."""

from __future__ import annotations

import pytest
from bench_builders import config_for, cpu_machine

from bench.hosts import ClusterConfig
from bench.launchers import launch_of
from bench.launchers.argv import Tools, node_argv
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.local import LocalLauncher
from bench.launchers.sites import REMOTE_SCRATCH
from bench.machine import NodeInfo
from bench.plan import local_placement, plan_sweep
from bench.spec import RunSpec

PY, HVD = "/env/bin/python", "/env/bin/horovodrun"


def spec_for(launcher: str) -> RunSpec:
    """One run of 2 ranks on one node ("localhost"), which every backend can run."""
    config = config_for(["--gpus", "2", "--launchers", launcher], cpu_machine())
    return plan_sweep(config, "s", local_placement(2), 2)[-1]


def backends() -> tuple[LocalLauncher, ClusterLauncher]:
    cluster = ClusterConfig(
        hosts=(("localhost", 2),),
        node_counts=(1,),
        gpus_per_node=(2,),
        remote_python=PY,
        remote_workdir="/srv/bench",
    )
    ssh = ClusterLauncher(cluster, environ={})
    ssh.infos = {
        "localhost": NodeInfo(
            "localhost",
            "vm",
            "3.11",
            torch="2.13.0",
            horovod="0.28.1",
            address="127.0.0.1",
            interface="lo",
        )
    }
    ssh.check(["ddp", "horovod"], "cpu")
    return LocalLauncher(Tools(PY, HVD)), ssh


def test_torchrun_argv_is_the_builders_on_every_backend() -> None:
    spec = spec_for("ddp")
    local, ssh = backends()
    launch = launch_of(spec)
    tools = Tools(PY, HVD)
    assert list(local.command(launch, port=29511).argv) == node_argv(
        launch, 0, tools, endpoint="localhost:29511"
    )
    (over_ssh,) = ssh.commands(launch, "gsb-x")
    assert list(over_ssh.argv) == node_argv(
        launch,
        0,
        tools,
        endpoint="localhost:29400",
        local_addr="127.0.0.1",
        log_dir=f"{REMOTE_SCRATCH}/gsb-x/localhost",
    )
    assert over_ssh.argv[:3] == (PY, "-m", "torch.distributed.run")
    assert "--rdzv-id=" + spec.run_id in over_ssh.argv
    assert over_ssh.argv[-3:] == ("bench.rank.worker", "--spec", spec.encode())


def test_horovodrun_argv_is_the_builders_on_every_backend() -> None:
    spec = spec_for("horovod")
    local, ssh = backends()
    launch = launch_of(spec)
    expected = node_argv(launch, 0, Tools(PY, HVD), endpoint="")
    assert list(local.command(launch).argv) == expected
    assert expected[:5] == [HVD, "-np", "2", "-H", "localhost:2"]
    (over_ssh,) = ssh.commands(launch, "gsb-y")
    # one node: no --network-interfaces (horovodrun looks for 127.0.0.1's interface among them)
    assert list(over_ssh.argv) == expected


@pytest.mark.parametrize("launcher", ["ddp", "horovod"])
def test_every_backend_gives_the_ranks_the_same_environment(launcher: str) -> None:
    launch = launch_of(spec_for(launcher))
    local, ssh = backends()
    base = local.command(launch).env
    (over_ssh,) = ssh.commands(launch, "gsb-z")
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONUNBUFFERED"):
        assert base[key] == over_ssh.env[key]

"""The local, ssh and Slurm backends turn the same spec into the same torchrun/horovodrun argv:
each is exactly what the one builder returns, given only the values that backend alone knows
(the rendezvous endpoint, the node's address, where rank logs go)."""

from __future__ import annotations

import dataclasses

import pytest
from bench_builders import config_for, cpu_machine

from bench.hosts import ClusterConfig
from bench.launchers import launch_of
from bench.launchers.argv import Tools, horovodrun_argv, shell_join, torchrun_argv
from bench.launchers.local import LocalLauncher
from bench.launchers.slurm import JOB_VARIABLES, SlurmLauncher, SlurmOptions, job_script
from bench.launchers.ssh import SshLauncher
from bench.launchers.transport import REMOTE_SCRATCH
from bench.machine import NodeInfo
from bench.plan import local_placement, plan_sweep
from bench.spec import RunSpec

PY, HVD = "/env/bin/python", "/env/bin/horovodrun"


def spec_for(launcher: str) -> RunSpec:
    """One run of 2 ranks on one node ("localhost"), which every backend can run."""
    config = config_for(["--gpus", "2", "--launchers", launcher], cpu_machine())
    return plan_sweep(config, "s", local_placement(2), 2)[-1]


def backends() -> tuple[LocalLauncher, SshLauncher, SlurmLauncher]:
    cluster = ClusterConfig(
        hosts=(("localhost", 2),),
        node_counts=(1,),
        gpus_per_node=(2,),
        remote_python=PY,
        remote_workdir="/srv/bench",
    )
    ssh = SshLauncher(cluster, environ={})
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
    slurm = SlurmLauncher(dataclasses.replace(cluster, hosts=(), slurm=True), "cpu")
    return LocalLauncher(Tools(PY, HVD)), ssh, slurm


def test_torchrun_argv_is_the_builders_on_every_backend(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = spec_for("ddp")
    local, ssh, slurm = backends()
    launch = launch_of(spec)
    same = {
        "nnodes": 1,
        "nproc_per_node": 2,
        "rdzv_id": spec.run_id,
        "module": "bench.rank.worker",
        "args": ["--spec", spec.encode()],
    }
    assert list(local.command(launch, port=29511).argv) == torchrun_argv(
        PY, **same, endpoint="localhost:29511", is_host=True
    )
    (over_ssh,) = ssh.commands(launch, "gsb-x")
    assert list(over_ssh.argv) == torchrun_argv(
        PY,
        **same,
        endpoint="localhost:29400",
        is_host=True,
        local_addr="127.0.0.1",
        log_dir=f"{REMOTE_SCRATCH}/gsb-x/localhost",
    )
    script = job_script(slurm.slurm_run(launch, 60, tmp_path), SlurmOptions())
    in_job = torchrun_argv(
        PY, **same, endpoint="${head}:29400", is_host="${is_host}", local_addr="${BENCH_NODE_ADDR}"
    )
    assert shell_join(in_job, JOB_VARIABLES) in script


def test_horovodrun_argv_is_the_builders_on_every_backend(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = spec_for("horovod")
    local, ssh, slurm = backends()
    launch = launch_of(spec)
    same = {"np": 2, "module": "bench.rank.worker", "args": ["--spec", spec.encode()]}
    assert list(local.command(launch).argv) == horovodrun_argv(HVD, PY, **same, hosts="localhost:2")
    (over_ssh,) = ssh.commands(launch, "gsb-y")
    assert list(over_ssh.argv) == horovodrun_argv(
        HVD, PY, **same, hosts="localhost:2", network_interfaces="lo"
    )
    script = job_script(slurm.slurm_run(launch, 60, tmp_path), SlurmOptions())
    in_job = horovodrun_argv(HVD, PY, **same, hosts="${hosts}", network_interfaces="${interfaces}")
    assert "exec " + shell_join(in_job, JOB_VARIABLES) + "\n" in script


@pytest.mark.parametrize("launcher", ["ddp", "horovod"])
def test_every_backend_gives_the_ranks_the_same_environment(launcher: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    launch = launch_of(spec_for(launcher))
    local, ssh, slurm = backends()
    base = local.command(launch).env
    (over_ssh,) = ssh.commands(launch, "gsb-z")
    in_job = slurm.slurm_run(launch, 60, tmp_path).env
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONUNBUFFERED"):
        assert base[key] == over_ssh.env[key] == in_job[key]

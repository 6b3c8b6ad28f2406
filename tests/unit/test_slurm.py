"""Slurm job scripts and submission parsing, without a cluster.

The generated bash is executed for real against stand-in `scontrol`/`srun`/`python`/`horovodrun`
commands that record what they were asked to do, so the quoting and the per-node logic (which
node hosts the rendezvous, which address and interface each one advertises) are checked by
running them. tests/integration/test_slurm_cluster.py runs the same scripts on a real
slurmctld/slurmd.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import launch
from bench.hosts import ClusterConfig
from bench.plan import HostSlots
from bench.remote import SshOptions
from bench.slurm import (
    SlurmCluster,
    SlurmOptions,
    SlurmRun,
    allocation_args,
    job_script,
    parse_job_id,
    parse_scontrol_record,
)

REPO = Path(__file__).resolve().parents[2]


def make_run(**overrides: object) -> SlurmRun:
    fields: dict[str, object] = {
        "run_id": "ddp-n4-fp32-r0",
        "launcher": "ddp",
        "nodes": 2,
        "ranks_per_node": 2,
        "entry": ("--module", "bench.worker", "--spec", "eyJhIjogMX0="),
        "python": "/opt/envs/train/bin/python",
        "workdir": str(REPO),
        "run_dir": "/shared/results/sweep1/slurm",
        "timeout_s": 300,
        "gpu": False,
        "env": {"OMP_NUM_THREADS": "1", "ODD": "a b'c"},
    }
    fields.update(overrides)
    return SlurmRun(**fields)  # type: ignore[arg-type]


def test_allocation_asks_for_whole_nodes_and_a_time_limit() -> None:
    run = make_run()
    assert run.time_limit_min == 8  # (300 s run + 180 s startup) / 60, rounded up
    assert allocation_args(run, SlurmOptions()) == [
        "--job-name=bench-ddp-n4-fp32-r0", "--nodes=2", "--ntasks-per-node=1", "--time=8",
        "--exclusive",
    ]  # fmt: skip
    gpu = allocation_args(
        make_run(gpu=True, ranks_per_node=8),
        SlurmOptions(partition="a100", account="ml", qos="bench", exclusive=False,
                     extra_args=("--reservation=maint",)),
    )  # fmt: skip
    assert gpu[-5:] == [
        "--gpus-per-node=8", "--partition=a100", "--account=ml", "--qos=bench",
        "--reservation=maint",
    ]  # fmt: skip
    assert "--exclusive" not in gpu


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"launcher": "mpi"}, "unknown launcher"),
        ({"nodes": 0}, "must be >= 1"),
        ({"launcher": "horovod"}, "path of horovodrun"),
        ({"run_id": "a b"}, "letters, digits"),
    ],
)
def test_bad_runs_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_run(**overrides)


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="sbatch or salloc"):
        SlurmOptions(submit="qsub")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be an option"):
        SlurmOptions(extra_args=("reservation=x",))


def test_sbatch_script_header_and_salloc_variant() -> None:
    script = job_script(make_run(), SlurmOptions(partition="cpu"))
    assert script.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=2\n" in script
    assert "#SBATCH --partition=cpu\n" in script
    assert "#SBATCH --output=/shared/results/sweep1/slurm/slurm-ddp-n4-fp32-r0-%j.out\n" in script
    salloc = job_script(make_run(), SlurmOptions(submit="salloc"))
    assert "#SBATCH" not in salloc  # salloc gets the same request on its command line
    for script_text in (script, salloc):
        done = subprocess.run(["bash", "-n"], input=script_text, text=True, capture_output=True)
        assert done.returncode == 0, done.stderr


STANDIN_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && printf 'nodeA\\nnodeB\\n'
"""
# One task per node, one node after the other; SLURMD_NODENAME as slurmd sets it.
STANDIN_SRUN = """#!/bin/bash
while [ "${1#-}" != "$1" ]; do shift; done
for n in nodeA nodeB; do SLURMD_NODENAME=$n "$@" || exit $?; done
"""
# The nodes' python: answers the survey as each node would, runs the real version check, and
# records the torchrun command line instead of starting torchrun.
STANDIN_PYTHON = """#!{python}
import os, sys
sys.path.insert(0, os.environ["RECORDER_DIR"])
import recorder
node = os.environ.get("SLURMD_NODENAME")
args = sys.argv[1:]
if args[:3] == ["-m", "bench.remote", "survey"] and "--exports" in args:
    var = args[args.index("--exports") + 1]
    print(f'export {var}="${{{var}:-if-{node}}}"')
    print(f"export BENCH_NODE_ADDR=addr-{node}")
elif args[:3] == ["-m", "bench.remote", "survey"]:
    torch = os.environ.get("STANDIN_TORCH_B", "2.13.0") if node == "nodeB" else "2.13.0"
    recorder.survey(node, torch)
elif args[:3] == ["-m", "bench.remote", "check-versions"]:
    from bench import remote
    sys.exit(remote.main(args[2:]))
elif args[:2] == ["-m", "torch.distributed.run"]:
    recorder.record("torchrun", args[2:])
else:
    sys.exit(f"unexpected python call: {args}")
"""
STANDIN_HOROVODRUN = """#!{python}
import os, sys
sys.path.insert(0, os.environ["RECORDER_DIR"])
import recorder
recorder.record("horovodrun", sys.argv[1:])
"""
RECORDER = """import json, os
from bench.remote import SURVEY_MARKER

def record(tool, argv):
    env = os.environ.get
    print("CALL", json.dumps({"tool": tool, "argv": argv, "node": env("SLURMD_NODENAME"),
        "run": env("GPUSTACK_BENCH_RUN"), "gloo_ifname": env("GLOO_SOCKET_IFNAME"),
        "odd": env("ODD"), "cwd": os.getcwd()}))

def survey(node, torch):
    info = {"hostname": node, "python": "3.11", "torch": torch, "horovod": "0.28.1",
            "interface": "if-" + node}
    print(SURVEY_MARKER, json.dumps(info))
"""


def run_script(tmp_path: Path, run: SlurmRun, extra_env: dict[str, str] | None = None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("scontrol", STANDIN_SCONTROL), ("srun", STANDIN_SRUN),
                       ("python", STANDIN_PYTHON), ("horovodrun", STANDIN_HOROVODRUN)):  # fmt: skip
        (bin_dir / name).write_text(text.replace("{python}", sys.executable))
        (bin_dir / name).chmod(0o755)
    (tmp_path / "recorder.py").write_text(RECORDER)
    script = tmp_path / "job.sh"
    script.write_text(job_script(run, SlurmOptions()))
    env = {
        **{k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node[A-B]",
        "SLURM_JOB_ID": "77",
        "RECORDER_DIR": str(tmp_path),
        **(extra_env or {}),
    }
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    calls = [json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("CALL ")]
    return done, calls


def test_ddp_job_runs_torchrun_on_every_node_with_c10d(tmp_path: Path) -> None:
    run = make_run(python=str(tmp_path / "bin" / "python"))
    done, calls = run_script(tmp_path, run)
    assert done.returncode == 0, done.stderr
    assert "bench: 2 node(s) agree on torch" in done.stderr
    assert "bench: interfaces to nodeA: if-nodeA,if-nodeB" in done.stdout
    assert [c["node"] for c in calls] == ["nodeA", "nodeB"]
    common = [
        "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
        "--rdzv-id", "ddp-n4-fp32-r0", "--max-restarts", "0",
        "--rdzv-endpoint=nodeA:29400",
    ]  # fmt: skip
    entry = ["--module", "bench.worker", "--spec", "eyJhIjogMX0="]
    assert calls[0]["argv"] == [
        *common, "--rdzv-conf=is_host=1,join_timeout=300", "--local-addr=addr-nodeA", *entry,
    ]  # fmt: skip
    assert calls[1]["argv"] == [
        *common, "--rdzv-conf=is_host=0,join_timeout=300", "--local-addr=addr-nodeB", *entry,
    ]  # fmt: skip
    for call, name in zip(calls, ("nodeA", "nodeB"), strict=True):
        assert call["gloo_ifname"] == f"if-{name}"
        assert call["run"] == "ddp-n4-fp32-r0"
        assert call["odd"] == "a b'c"
        assert call["cwd"] == str(REPO)


def test_a_users_interface_choice_reaches_every_node(tmp_path: Path) -> None:
    run = make_run(python=str(tmp_path / "bin" / "python"))
    done, calls = run_script(tmp_path, run, {"GLOO_SOCKET_IFNAME": "ib0"})
    assert done.returncode == 0, done.stderr
    assert [c["gloo_ifname"] for c in calls] == ["ib0", "ib0"]


def test_mismatched_nodes_stop_the_job_before_launch(tmp_path: Path) -> None:
    run = make_run(python=str(tmp_path / "bin" / "python"))
    done, calls = run_script(tmp_path, run, {"STANDIN_TORCH_B": "2.12.0"})
    assert done.returncode == 3
    assert "torch: 2.13.0 on nodeA; 2.12.0 on nodeB" in done.stderr
    assert calls == []


def test_horovod_job_runs_horovodrun_over_the_allocation(tmp_path: Path) -> None:
    run = make_run(
        launcher="horovod", python=str(tmp_path / "bin" / "python"),
        horovodrun=str(tmp_path / "bin" / "horovodrun"),
        entry=("/opt/envs/train/bin/python", "-m", "bench.worker", "--spec", "S"),
        ssh=SshOptions(port=2213, identity_file="/home/u/.ssh/bench key"),
    )  # fmt: skip
    done, calls = run_script(tmp_path, run)
    assert done.returncode == 0, done.stderr
    assert "--components torch,horovod" in run_script_text(run)
    (call,) = calls
    assert call["tool"] == "horovodrun"
    assert call["argv"] == [
        "-np", "4", "-H", "nodeA:2,nodeB:2", "--start-timeout", "300",
        "--network-interfaces", "if-nodeA,if-nodeB", "--gloo", "-p", "2213",
        "--ssh-identity-file", "/home/u/.ssh/bench key",
        "/opt/envs/train/bin/python", "-m", "bench.worker", "--spec", "S",
    ]  # fmt: skip
    assert call["run"] == "ddp-n4-fp32-r0"


def run_script_text(run: SlurmRun) -> str:
    return job_script(run, SlurmOptions())


def test_gpu_jobs_pin_nccl_and_compare_the_gpu_stack() -> None:
    script = job_script(make_run(gpu=True), SlurmOptions())
    assert "--exports NCCL_SOCKET_IFNAME" in script
    assert "--components torch,nccl,driver_branch" in script
    horovod = job_script(
        make_run(gpu=True, launcher="horovod", horovodrun="/h"), SlurmOptions()
    )  # fmt: skip
    assert "--components torch,horovod,nccl,driver_branch" in horovod
    assert "--gloo" not in horovod  # horovodrun picks its controller on GPU clusters


@pytest.mark.parametrize(
    ("text", "job_id"),
    [
        ("12345\n", "12345"),
        ("12345;cluster2\n", "12345"),
        ("salloc: Granted job allocation 88\nsalloc: Waiting for resource configuration\n", "88"),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified\n", None),
        ("", None),
    ],
)
def test_job_ids_from_sbatch_and_salloc(text: str, job_id: str | None) -> None:
    assert parse_job_id(text) == job_id


def test_scontrol_record() -> None:
    line = (
        "JobId=42 JobName=bench-x UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
        "ExitCode=0:15 BatchHost=gsb1 NodeList=gsb[1-2] StdOut=/r/slurm-x-42.out\n"
    )
    record = parse_scontrol_record(line)
    assert record["JobState"] == "TIMEOUT"
    assert record["BatchHost"] == "gsb1"
    assert record["ExitCode"] == "0:15"
    assert parse_scontrol_record("") == {}


def slurm_cluster(device: str = "cpu") -> SlurmCluster:
    cluster = ClusterConfig(
        hosts=(), node_counts=(2,), gpus_per_node=(4,), slurm=True, ssh_port=2213,
        remote_python="/env/bin/python", remote_workdir="/srv/bench", slurm_partition="gpu",
        slurm_args=("--qos=bench",),
    )  # fmt: skip
    return SlurmCluster(cluster, device)


def test_a_ddp_launch_becomes_a_two_node_job(tmp_path: Path) -> None:
    executor = slurm_cluster("cuda")
    placement = (HostSlots("slurm-node1", 4), HostSlots("slurm-node2", 4))
    commands = launch.torchrun_commands(
        placement, "bench.worker", ["--spec", "S"], rdzv_id="ddp-n8-N2-r0",
        rdzv_endpoint="slurm-node1:29400", env={"OMP_NUM_THREADS": "2", "PYTHONPATH": "/here"},
        tools=executor.tools,
    )  # fmt: skip
    run = executor.slurm_run(commands, 600, tmp_path / "logs" / "ddp-n8-N2-r0.log")
    assert (run.launcher, run.nodes, run.ranks_per_node, run.gpu) == ("ddp", 2, 4, True)
    assert run.entry == ("--module", "bench.worker", "--spec", "S")
    assert run.env == {"OMP_NUM_THREADS": "2"}  # the job script sets PYTHONPATH itself
    assert (run.python, run.workdir) == ("/env/bin/python", "/srv/bench")
    assert run.run_dir == str(tmp_path / "slurm")
    assert allocation_args(run, executor.options)[-4:] == [
        "--gpus-per-node=4", "--exclusive", "--partition=gpu", "--qos=bench",
    ]  # fmt: skip


def test_a_horovod_launch_becomes_a_job_running_horovodrun(tmp_path: Path) -> None:
    executor = slurm_cluster()
    placement = (HostSlots("slurm-node1", 4), HostSlots("slurm-node2", 4))
    commands = launch.horovodrun_command(
        placement, "bench.worker", ["--spec", "S"], env={}, tools=executor.tools
    )
    run = executor.slurm_run(commands, 60, tmp_path / "logs" / "horovod-n8-N2-r0.log")
    assert (run.launcher, run.nodes, run.ranks_per_node) == ("horovod", 2, 4)
    assert run.entry == ("/env/bin/python", "-m", "bench.worker", "--spec", "S")
    assert run.horovodrun == "/env/bin/horovodrun" and run.ssh.port == 2213

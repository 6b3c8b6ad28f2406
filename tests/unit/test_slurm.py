"""Slurm job scripts and submission parsing, without a cluster.

The generated bash is executed for real against stand-in `scontrol`/`srun`/`python`/`horovodrun`
commands that record what they were asked to do, so the quoting and the per-node logic (which
node hosts the rendezvous, which address and interface each one advertises) are checked by
running them. tests/integration/test_slurm_cluster.py runs the same scripts on a real
slurmctld/slurmd.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.hosts import ClusterConfig
from bench.launchers import WORKER_MODULE, Launch
from bench.launchers.argv import Tools, shell_join, torchrun_argv
from bench.launchers.slurm import (
    JOB_VARIABLES,
    SlurmLauncher,
    SlurmOptions,
    SlurmRun,
    allocation_args,
    job_horovodrun_argv,
    job_script,
    job_torchrun_argv,
    parse_job_id,
    parse_scontrol_record,
)
from bench.launchers.transport import SshOptions
from bench.spec import HostSlots

REPO = Path(__file__).resolve().parents[2]


SPEC_ARG = "eyJhIjogMX0="


def make_launch(
    launcher: str = "ddp",
    nodes: int = 2,
    ranks_per_node: int = 2,
    launch_id: str = "ddp-n4-fp32-r0",
) -> Launch:
    placement = tuple(HostSlots(f"slurm-node{i + 1}", ranks_per_node) for i in range(nodes))
    return Launch(launch_id, launcher, WORKER_MODULE, ("--spec", SPEC_ARG), placement, 1, "cpu")


def make_run(launch: Launch | None = None, **overrides: object) -> SlurmRun:
    fields: dict[str, object] = {
        "launch": launch or make_launch(),
        "tools": Tools("/opt/envs/train/bin/python", "/opt/envs/train/bin/horovodrun"),
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
        "--job-name=bench-ddp-n4-fp32-r0",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=8",
        "--exclusive",
    ]
    gpu = allocation_args(
        make_run(make_launch(ranks_per_node=8), gpu=True),
        SlurmOptions(
            partition="a100",
            account="ml",
            qos="bench",
            exclusive=False,
            extra_args=("--reservation=maint",),
        ),
    )
    assert gpu[-5:] == [
        "--gpus-per-node=8",
        "--partition=a100",
        "--account=ml",
        "--qos=bench",
        "--reservation=maint",
    ]
    assert "--exclusive" not in gpu


def test_bad_runs_are_refused() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        make_run(make_launch(launch_id="a b"))
    with pytest.raises(ValueError, match="path of horovodrun"):
        make_run(make_launch("horovod"), tools=Tools("/py", ""))
    uneven = Launch("r", "ddp", WORKER_MODULE, (), (HostSlots("a", 2), HostSlots("b", 1)), 1, "cpu")
    with pytest.raises(ValueError, match="same number of ranks on every node"):
        make_run(uneven)


def test_every_job_carries_its_sweep_in_its_comment() -> None:
    """The comment a resume finds the sweep's leftover jobs by (bench.resume), in the one
    request both sbatch (#SBATCH lines) and salloc (its command line) get."""
    launch = dataclasses.replace(make_launch(), sweep_id="20261124-101500-login1")
    run = make_run(launch)
    comment = "--comment=gpustack-sweep:20261124-101500-login1"
    assert allocation_args(run, SlurmOptions())[4] == comment
    assert f"#SBATCH {comment}\n" in job_script(run, SlurmOptions())
    salloc = SlurmOptions(submit="salloc")
    assert comment in allocation_args(run, salloc) and comment not in job_script(run, salloc)
    untagged = allocation_args(make_run(), SlurmOptions())
    assert not any(arg.startswith("--comment") for arg in untagged)
    with pytest.raises(ValueError, match="sweep id 'a b' must be letters"):
        make_run(dataclasses.replace(make_launch(), sweep_id="a b"))


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
if args[:3] == ["-m", "bench.launchers.on_node", "survey"] and "--exports" in args:
    var = args[args.index("--exports") + 1]
    print(f'export {var}="${{{var}:-if-{node}}}"')
    print(f"export BENCH_NODE_ADDR=addr-{node}")
elif args[:3] == ["-m", "bench.launchers.on_node", "survey"]:
    torch = os.environ.get("STANDIN_TORCH_B", "2.13.0") if node == "nodeB" else "2.13.0"
    recorder.survey(node, torch)
elif args[:3] == ["-m", "bench.launchers.on_node", "check-versions"]:
    from bench.launchers import on_node as node_cli
    sys.exit(node_cli.main(args[2:]))
elif args[:2] == ["-m", "torch.distributed.run"]:
    recorder.record("torchrun", sys.argv)
else:
    sys.exit(f"unexpected python call: {args}")
"""
STANDIN_HOROVODRUN = """#!{python}
import os, sys
sys.path.insert(0, os.environ["RECORDER_DIR"])
import recorder
recorder.record("horovodrun", sys.argv)
"""
RECORDER = """import json, os
from bench.machine import SURVEY_MARKER

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
    for name, text in (
        ("scontrol", STANDIN_SCONTROL),
        ("srun", STANDIN_SRUN),
        ("python", STANDIN_PYTHON),
        ("horovodrun", STANDIN_HOROVODRUN),
    ):
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


def standin_run(tmp_path: Path, launch: Launch | None = None, **overrides: object) -> SlurmRun:
    tools = Tools(str(tmp_path / "bin" / "python"), str(tmp_path / "bin" / "horovodrun"))
    return make_run(launch, tools=tools, **overrides)


def test_ddp_job_runs_exactly_the_builders_torchrun_on_every_node(tmp_path: Path) -> None:
    run = standin_run(tmp_path)
    script = job_script(run, SlurmOptions())
    assert shell_join(job_torchrun_argv(run), JOB_VARIABLES) in script
    done, calls = run_script(tmp_path, run)
    assert done.returncode == 0, done.stderr
    assert "bench: 2 node(s) agree on torch" in done.stderr
    assert "bench: interfaces to nodeA: if-nodeA,if-nodeB" in done.stdout
    assert [c["node"] for c in calls] == ["nodeA", "nodeB"]
    for call, (name, is_host) in zip(calls, (("nodeA", "1"), ("nodeB", "0")), strict=True):
        # the builder's argv, with what the job script filled in on the node
        assert call["argv"] == torchrun_argv(
            run.tools.python,
            nnodes=2,
            nproc_per_node=2,
            endpoint="nodeA:29400",
            rdzv_id="ddp-n4-fp32-r0",
            module=WORKER_MODULE,
            args=["--spec", SPEC_ARG],
            is_host=is_host,
            local_addr=f"addr-{name}",
        )
        assert call["gloo_ifname"] == f"if-{name}"
        assert call["run"] == "ddp-n4-fp32-r0"
        assert call["odd"] == "a b'c"
        assert call["cwd"] == str(REPO)


def test_a_users_interface_choice_reaches_every_node(tmp_path: Path) -> None:
    done, calls = run_script(tmp_path, standin_run(tmp_path), {"GLOO_SOCKET_IFNAME": "ib0"})
    assert done.returncode == 0, done.stderr
    assert [c["gloo_ifname"] for c in calls] == ["ib0", "ib0"]


def test_mismatched_nodes_stop_the_job_before_launch(tmp_path: Path) -> None:
    done, calls = run_script(tmp_path, standin_run(tmp_path), {"STANDIN_TORCH_B": "2.12.0"})
    assert done.returncode == 3
    assert "torch: 2.13.0 on nodeA; 2.12.0 on nodeB" in done.stderr
    assert calls == []


def test_horovod_job_runs_exactly_the_builders_horovodrun(tmp_path: Path) -> None:
    run = standin_run(
        tmp_path,
        make_launch("horovod"),
        ssh=SshOptions(port=2213, identity_file="/home/u/.ssh/bench key"),
    )
    script = job_script(run, SlurmOptions())
    assert "--components torch,horovod" in script
    assert shell_join(job_horovodrun_argv(run), JOB_VARIABLES) in script
    done, calls = run_script(tmp_path, run)
    assert done.returncode == 0, done.stderr
    (call,) = calls
    assert call["tool"] == "horovodrun"
    assert call["argv"] == [
        run.tools.horovodrun,
        "-np",
        "4",
        "-H",
        "nodeA:2,nodeB:2",
        "--gloo",
        "--start-timeout",
        "300",
        "--network-interfaces",
        "if-nodeA,if-nodeB",
        "-p",
        "2213",
        "--ssh-identity-file",
        "/home/u/.ssh/bench key",
        run.tools.python,
        "-m",
        WORKER_MODULE,
        "--spec",
        SPEC_ARG,
    ]
    assert call["run"] == "ddp-n4-fp32-r0"


def test_gpu_jobs_pin_nccl_and_compare_the_gpu_stack() -> None:
    script = job_script(make_run(gpu=True), SlurmOptions())
    assert "--exports NCCL_SOCKET_IFNAME" in script
    assert "--components torch,nccl,driver_branch" in script
    horovod = job_script(make_run(make_launch("horovod"), gpu=True), SlurmOptions())
    assert "--components torch,horovod,nccl,driver_branch" in horovod
    assert " --gloo " in horovod  # the same controller as on every other backend


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


def slurm_launcher(device: str = "cpu") -> SlurmLauncher:
    cluster = ClusterConfig(
        hosts=(),
        node_counts=(2,),
        gpus_per_node=(4,),
        slurm=True,
        ssh_port=2213,
        remote_python="/env/bin/python",
        remote_workdir="/srv/bench",
        slurm_partition="gpu",
        slurm_args=("--qos=bench",),
    )
    return SlurmLauncher(cluster, device)


def test_a_ddp_launch_becomes_a_two_node_job(tmp_path: Path) -> None:
    launcher = slurm_launcher("cuda")
    launch = make_launch(ranks_per_node=4, launch_id="ddp-n8-N2-r0")
    run = launcher.slurm_run(launch, 600, tmp_path / "slurm")
    assert (run.launch, run.nodes, run.ranks_per_node, run.gpu) == (launch, 2, 4, True)
    assert run.env["OMP_NUM_THREADS"] == "1"
    assert "PYTHONPATH" not in run.env  # the job script sets it to the checkout on the nodes
    assert (run.tools.python, run.workdir) == ("/env/bin/python", "/srv/bench")
    assert run.run_dir == str(tmp_path / "slurm")
    assert allocation_args(run, launcher.options)[-4:] == [
        "--gpus-per-node=4",
        "--exclusive",
        "--partition=gpu",
        "--qos=bench",
    ]


def test_a_horovod_launch_becomes_a_job_running_horovodrun(tmp_path: Path) -> None:
    launcher = slurm_launcher()
    run = launcher.slurm_run(make_launch("horovod", ranks_per_node=4), 60, tmp_path)
    assert (run.launch.launcher, run.nodes, run.ranks_per_node) == ("horovod", 2, 4)
    assert run.tools.horovodrun == "/env/bin/horovodrun" and run.ssh.port == 2213
    assert job_horovodrun_argv(run)[:5] == ["/env/bin/horovodrun", "-np", "8", "-H", "${hosts}"]

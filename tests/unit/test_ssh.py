"""The ssh backend: ssh command lines, the commands each launch gets from the survey, running
them on several nodes with cleanup, and fetching results, all on this machine.

Nothing here leaves the machine: "remote" commands run on localhost (which the backend runs
through sh instead of ssh) or ssh to a closed loopback port.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine, run_row

from bench import report, rows
from bench.hosts import ClusterConfig, parse_hosts
from bench.launchers import RUN_TAG_VAR, ExecResult, launch_of, new_tag
from bench.launchers.argv import NodeCommand, Tools, node_argv
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.multinode import failure_reason, kill_run, run_on_nodes
from bench.launchers.sites import (
    REMOTE_SCRATCH,
    FetchError,
    HostUnreachableError,
    SshSite,
    check_reachable,
    fetch_dir,
    remote_run_dir,
    remove_remote_dir,
    run_on_host,
    shell_command,
)
from bench.launchers.stop import StopPolicy
from bench.launchers.versions import VersionMismatchError
from bench.machine import Environment, HorovodStatus, NodeInfo
from bench.plan import plan_sweep

PY = "/venv/bin/python"
TWO = parse_hosts("gpu01:8,gpu02:8")
QUICK = StopPolicy(grace_s=2)


def node(host: str, **fields: object) -> NodeInfo:
    base: dict[str, object] = {"hostname": host, "python": "3.11.7", "torch": "2.13.0"}
    base.update(fields)
    return NodeInfo.from_survey(host, base)


# ---------------------------------------------------------------- ssh


def test_ssh_never_prompts_and_fails_fast() -> None:
    args = SshSite().argv("node1", "true")
    pairs = {args[i + 1] for i, a in enumerate(args) if a == "-o"}
    assert {"BatchMode=yes", "ConnectTimeout=10", "StrictHostKeyChecking=accept-new"} <= pairs
    assert "ServerAliveInterval=15" in pairs and "ServerAliveCountMax=4" in pairs
    assert "-i" not in args and "-F" not in args


def test_ssh_options_for_a_fleet() -> None:
    site = SshSite(
        user="ubuntu",
        port=2222,
        identity_file="/k/id",
        connect_timeout_s=3,
        config_file="/k/config",
        extra_options=("Ciphers=aes128-gcm@openssh.com",),
    )
    argv = site.argv("node1", "echo hi")
    assert argv[:3] == ["ssh", "-F", "/k/config"]
    joined = " ".join(argv)
    for expected in (
        "-i /k/id",
        "-o IdentitiesOnly=yes",
        "-o User=ubuntu",
        "-o ConnectTimeout=3",
        "-o Ciphers=aes128-gcm@openssh.com",
        "-p 2222",
    ):
        assert expected in joined
    assert argv[-3:] == ["node1", "--", "sh -c 'echo hi'"]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's client")
def test_a_users_ssh_option_wins_over_the_bench_defaults() -> None:
    # ssh -G prints the configuration it would use, without connecting.
    site = SshSite(extra_options=("StrictHostKeyChecking=yes", "ConnectTimeout=30"))
    argv = [*site.argv("node1", "true")[:-3], "-G", "node1"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    effective = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert effective["stricthostkeychecking"] == "true"  # what ssh -G prints for "yes"
    assert effective["connecttimeout"] == "30"


def test_remote_command_survives_the_remote_shell_intact(tmp_path: Path) -> None:
    """What ssh hands to the login shell reproduces argv, env and cwd exactly."""
    argv = [
        sys.executable,
        "-c",
        "import os,sys,json; print(json.dumps([sys.argv[1:], os.environ['ODD'], os.getcwd()]))",
        "a b",
        "it's",
        "$HOME",
        '"q"',
    ]
    line = shell_command(argv, {"ODD": "x y;$(true)"}, str(tmp_path))
    login_shell_input = SshSite().argv("somehost", line)[-1]
    done = subprocess.run(["sh", "-c", login_shell_input], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["a b", "it's", "$HOME", '"q"'],
        "x y;$(true)",
        str(tmp_path),
    ]


def test_node_side_timeout_backstop() -> None:
    line = shell_command(["sleep", "30"], timeout_s=1)
    assert line.startswith("exec timeout --signal=TERM --kill-after=10s 1s sleep 30")
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", line], capture_output=True, timeout=20)
    assert done.returncode == 124
    assert time.monotonic() - started < 15
    with pytest.raises(ValueError, match="invalid environment variable"):
        shell_command(["true"], {"BAD-NAME": "1"})


def test_localhost_runs_without_ssh() -> None:
    assert SshSite().argv("localhost", "echo hi") == ["sh", "-c", "echo hi"]
    done = run_on_host("localhost", "echo hi; echo err >&2", SshSite(), 10)
    assert (done.returncode, done.stdout, done.stderr) == (0, "hi\n", "err\n")
    slow = run_on_host("localhost", "sleep 5", SshSite(), 0.5)
    assert slow.returncode == 124 and "timed out after 0.5s" in slow.stderr


def _closed_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


def test_unreachable_hosts_are_named_with_ssh_reason() -> None:
    site = SshSite(port=_closed_loopback_port(), connect_timeout_s=5)
    check_reachable(["localhost"], site)  # this machine needs no ssh
    with pytest.raises(HostUnreachableError) as err:
        check_reachable(["localhost", "127.0.0.2"], site, timeout_s=20)
    message = str(err.value)
    assert "cannot reach 1 of 2 host(s)" in message
    assert "127.0.0.2: ssh: connect to host 127.0.0.2 port" in message
    assert "Connection refused" in message
    assert f"ssh -p {site.port} -o BatchMode=yes HOST true" in message


# ---------------------------------------------------------------- what each launch gets


def ssh_launcher(**overrides: object) -> ClusterLauncher:
    fields: dict[str, object] = {
        "hosts": (("gpu01", 8), ("gpu02", 8)),
        "node_counts": (1, 2),
        "gpus_per_node": (8,),
        "ssh_port": 2222,
        "ssh_identity_file": "/home/u/.ssh/bench",
        "ssh_user": "u",
        "remote_python": PY,
        "remote_workdir": "/srv/bench",
    }
    fields.update(overrides)
    forwarded_and_not = {"NCCL_IB_HCA": "mlx5", "HOME": "/x"}
    launcher = ClusterLauncher(ClusterConfig(**fields), environ=forwarded_and_not)  # type: ignore[arg-type]
    gpu_stack = {
        "gpus": 8,
        "gpu_name": "NVIDIA H100",
        "gpu_capability": [9, 0],
        "horovod": "0.28.1",
        "nccl": "2.21.5",
        "driver": "550.54.15",
        "driver_branch": "550",
    }
    launcher.infos = {
        "gpu01": node("gpu01", address="10.0.0.1", interface="ens5", cores=64, **gpu_stack),
        "gpu02": node("gpu02", address="10.0.0.2", interface="ens6", cores=32, **gpu_stack),
    }
    return launcher


def two_node_specs(launcher: ClusterLauncher):  # type: ignore[no-untyped-def]
    config = config_for(["--model", "resnet18", "--launchers", "ddp,horovod"], cpu_machine())
    config = dataclasses.replace(config, cluster=launcher.cluster)
    ddp, horovod = [s for s in plan_sweep(config, "s", (), 2) if s.placement == TWO][:2]
    return ddp, horovod


def test_each_node_advertises_its_address_and_only_the_first_hosts_the_store() -> None:
    launcher = ssh_launcher()
    launcher.check(["ddp"], "cpu")
    ddp, _ = two_node_specs(launcher)
    first, second = launcher.commands(launch_of(ddp), "gsb-t1")
    assert (first.host, second.host) == ("gpu01", "gpu02")
    for index, (command, address) in enumerate(((first, "10.0.0.1"), (second, "10.0.0.2"))):
        assert list(command.argv) == node_argv(
            launch_of(ddp),
            index,
            Tools(PY),
            endpoint="gpu01:29400",
            local_addr=address,
            log_dir=f"{REMOTE_SCRATCH}/gsb-t1/{command.host}",
        )
        assert f"--rdzv-conf=is_host={int(index == 0)},join_timeout=300" in command.argv
        assert "--nnodes=2" in command.argv and "--nproc-per-node=8" in command.argv
    assert second.env["GLOO_SOCKET_IFNAME"] == "ens6" and second.env["PYTHONPATH"] == "/srv/bench"
    assert second.env["OMP_NUM_THREADS"] == "1"
    # building twice builds the same thing: the log directory comes from the launch's tag
    assert launcher.commands(launch_of(ddp), "gsb-t1") == [first, second]
    assert launcher.rank_log_dirs(launch_of(ddp), "gsb-t1") == {
        "gpu01": f"{REMOTE_SCRATCH}/gsb-t1/gpu01",
        "gpu02": f"{REMOTE_SCRATCH}/gsb-t1/gpu02",
    }
    assert launcher.tools.python == PY and launcher.tools.horovodrun == "/venv/bin/horovodrun"


def test_tf_runs_one_worker_per_node_named_in_each_ones_tf_config() -> None:
    launcher = ssh_launcher()
    with pytest.raises(VersionMismatchError, match="TensorFlow: not installed on gpu01, gpu02"):
        launcher.check(["tf"], "cuda")
    for host, info in launcher.infos.items():
        launcher.infos[host] = dataclasses.replace(info, tensorflow="2.21.0")
    launcher.check(["tf"], "cuda")
    config = config_for(["--launchers", "tf", "--image-size", "64"], cpu_machine())
    config = dataclasses.replace(config, cluster=launcher.cluster)
    one, two = [s for s in plan_sweep(config, "s", (), 2)][:2]
    assert (one.nodes, two.nodes) == (1, 2)
    commands = launcher.commands(launch_of(two), "gsb-t1")
    assert [c.host for c in commands] == ["gpu01", "gpu02"]
    for index, command in enumerate(commands):
        assert list(command.argv) == [PY, "-m", "bench.rank.keras_worker", "--spec", two.encode()]
        # the workers at the addresses the survey found, each on the rendezvous port
        assert json.loads(command.env["TF_CONFIG"]) == {
            "cluster": {"worker": ["10.0.0.1:29400", "10.0.0.2:29400"]},
            "task": {"type": "worker", "index": index},
        }
        assert "CUDA_DEVICE_ORDER" not in command.env  # a CPU run; GPU ranks get PCI order
        # one process drives the node's 8 GPUs with every core (2 cores planned here)
        assert command.env["OMP_NUM_THREADS"] == "2"
    assert launcher.rank_log_dirs(launch_of(two), "gsb-t1") == {}  # its own output, no torchrun
    # one node: MirroredStrategy alone, no TF_CONFIG
    (single,) = launcher.commands(launch_of(one), "gsb-t2")
    assert single.host == "gpu01" and "TF_CONFIG" not in single.env


def test_horovodrun_gets_the_ssh_port_key_and_interfaces() -> None:
    launcher = ssh_launcher()
    launcher.check(["ddp", "horovod"], "cpu")
    _, horovod = two_node_specs(launcher)
    (hvd,) = launcher.commands(launch_of(horovod), "gsb-t2")
    assert hvd.host == "gpu01"
    assert list(hvd.argv) == [
        "/venv/bin/horovodrun",
        "-np",
        "16",
        "-H",
        "gpu01:8,gpu02:8",
        "--gloo",
        "--start-timeout",
        "300",
        "--network-interfaces",
        "ens5,ens6",
        "-p",
        "2222",
        "--ssh-identity-file",
        "/home/u/.ssh/bench",
        PY,
        "-m",
        "bench.rank.worker",
        "--spec",
        horovod.encode(),
    ]
    assert hvd.env["PYTHONPATH"] == "/srv/bench"
    assert launcher.rank_log_dirs(launch_of(horovod), "gsb-t2") == {}
    bare = ssh_launcher(ssh_port=None, ssh_identity_file=None, network_interface="eth0")
    (plain,) = bare.commands(launch_of(horovod), "gsb-t3")
    assert "-p" not in plain.argv and "--ssh-identity-file" not in plain.argv
    assert plain.argv[plain.argv.index("--network-interfaces") + 1] == "eth0"


def test_each_node_gets_its_interface_checkout_and_the_forwarded_settings() -> None:
    launcher = ssh_launcher()
    launcher.check(["ddp"], "cuda")
    env = launcher.node_env(TWO)
    assert env["gpu01"] == {
        "NCCL_IB_HCA": "mlx5",
        "PYTHONPATH": "/srv/bench",
        "NCCL_SOCKET_IFNAME": "ens5",
    }
    assert env["gpu02"]["NCCL_SOCKET_IFNAME"] == "ens6"
    assert launcher.interfaces_seen(TWO) == {"NCCL_SOCKET_IFNAME": "ens5,ens6"}
    pinned = ssh_launcher(network_interface="ib0")
    pinned.check(["ddp"], "cpu")
    assert pinned.node_env(TWO)["gpu02"]["GLOO_SOCKET_IFNAME"] == "ib0"


def test_the_nodes_decide_device_gpus_and_horovod() -> None:
    local = Environment("cpu", 0, "", False, False, 2, HorovodStatus(False, reason="absent"))
    env = ssh_launcher().environment(local)
    assert (env.device, env.gpu_count, env.gpu_name, env.cores) == ("cuda", 8, "NVIDIA H100", 32)
    assert env.bf16_supported and env.tf32_supported
    assert env.horovod == HorovodStatus(True, "0.28.1", nccl_built=None)
    launcher = ssh_launcher()
    launcher.infos["gpu02"] = node("gpu02", gpus=0, cores=2)
    env = launcher.environment(local)
    assert (env.device, env.gpu_count) == ("cpu", 0)
    assert env.horovod.reason == "Horovod is not installed on gpu02"


def test_versions_are_compared_for_the_launchers_in_the_sweep() -> None:
    launcher = ssh_launcher()
    launcher.infos["gpu02"] = dataclasses.replace(launcher.infos["gpu02"], horovod=None)
    launcher.check(["ddp"], "cpu")
    with pytest.raises(VersionMismatchError, match=r"Horovod: 0\.28\.1 on gpu01; not installed"):
        launcher.check(["ddp", "horovod"], "cpu")


# ---------------------------------------------------------------- running, cleanup, fetching


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_cleanup_kills_exactly_the_runs_processes() -> None:
    def start(tag: str) -> subprocess.Popen:
        # A launcher whose child left its session, as torchrun's workers do.
        return subprocess.Popen(
            ["sh", "-c", "setsid sleep 300 & echo $!; exec sleep 300"],
            env={**os.environ, RUN_TAG_VAR: tag},
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    ours, decoy = start("run-a"), start("run-b")
    assert ours.stdout and decoy.stdout
    our_child, decoy_child = int(ours.stdout.readline()), int(decoy.stdout.readline())
    try:
        results = kill_run(["localhost"], "run-a", SshSite(), StopPolicy(grace_s=5))
        assert results["localhost"].returncode == 0
        ours.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(our_child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(our_child)
        assert decoy.poll() is None and _alive(decoy_child)
    finally:
        for pid in (decoy.pid, decoy_child, our_child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        decoy.wait(timeout=10)


def test_a_failing_node_stops_the_others(tmp_path: Path) -> None:
    commands = [
        NodeCommand("localhost", ("sh", "-c", "echo 'RuntimeError: node died'; exit 3")),
        NodeCommand("localhost", ("sleep", "300")),
    ]
    result = run_on_nodes(
        commands,
        SshSite(),
        tag="gsb-unit-fail",
        timeout_s=60,
        log_dir=tmp_path,
        failure_grace_s=0.5,
        policy=QUICK,
    )
    assert not result.ok and not result.timed_out
    failed, stopped = result.outcomes
    assert failed.returncode == 3 and not failed.stopped
    assert stopped.stopped and stopped.returncode != 0
    assert result.wall_s < 30
    summary = result.failure_summary()
    assert "localhost: exited with rc=3: RuntimeError: node died" in summary
    assert "localhost: stopped after another node failed" in summary
    assert (tmp_path / "node0-localhost.log").read_text() == "RuntimeError: node died\n"


def test_a_start_that_fails_part_way_stops_the_nodes_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "first.pid"

    class SecondNodeCannotStart:
        how = "ssh"

        def argv(self, host: str, command: str) -> list[str]:
            if host == "localhost":
                return SshSite().argv(host, command)
            deadline = time.monotonic() + 30  # the first node runs before the second starts
            while not pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            return [str(tmp_path / "no-such-launcher")]

    commands = [
        NodeCommand(
            "localhost",
            ("sh", "-c", f"echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; exec sleep 300"),
        ),
        NodeCommand("node2", ("true",)),
    ]
    with pytest.raises(FileNotFoundError):
        run_on_nodes(
            commands,
            SecondNodeCannotStart(),
            tag="gsb-unit-start",
            timeout_s=60,
            log_dir=tmp_path,
            policy=QUICK,
        )
    first = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 10
        while _alive(first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(first)
    finally:
        if _alive(first):  # left running: the failure above says so
            os.kill(first, signal.SIGKILL)


def test_an_overrunning_run_times_out_on_every_node(tmp_path: Path) -> None:
    commands = [NodeCommand("localhost", ("sleep", "300"), {"X": "1"})]
    result = run_on_nodes(
        commands,
        SshSite(),
        tag="gsb-unit-timeout",
        timeout_s=0.5,
        log_dir=tmp_path,
        policy=QUICK,
    )
    assert result.timed_out and not result.ok
    assert result.outcomes[0].timed_out
    assert "timed out" in result.failure_summary()


def test_an_overrun_is_stopped_on_the_node_with_the_common_policy(tmp_path: Path) -> None:
    """A rank that ignores the first signal gets the last one after the policy's grace."""
    stubborn = "trap 'echo got TERM' TERM; while :; do sleep 0.1; done"
    commands = [NodeCommand("localhost", ("sh", "-c", stubborn))]
    result = run_on_nodes(
        commands,
        SshSite(),
        tag="gsb-unit-stubborn",
        timeout_s=1,
        log_dir=tmp_path,
        policy=QUICK,
    )
    assert result.timed_out
    assert result.cleanup["localhost"].startswith("killed after 2s grace: ")
    assert "got TERM" in result.outcomes[0].output()


def test_success_needs_no_cleanup(tmp_path: Path) -> None:
    commands = [
        NodeCommand("localhost", ("sh", "-c", 'echo "$X $GPURIG_BENCH_RUN $PWD"'), {"X": "1"})
    ]
    result = run_on_nodes(
        commands,
        SshSite(),
        tag="gsb-unit-ok",
        timeout_s=30,
        log_dir=tmp_path / "logs",
        workdir=str(tmp_path),
    )
    assert result.ok and result.cleanup == {}
    assert result.outcomes[0].output() == f"1 gsb-unit-ok {tmp_path}\n"


def test_fetch_from_this_machine_and_scratch_guard(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "rank0.json").write_text("{}")
    (source / "sub" / "log.txt").write_text("x")
    fetch_dir("localhost", str(source), tmp_path / "dest", SshSite())
    files = sorted(p for p in (tmp_path / "dest").rglob("*") if p.is_file())
    assert [p.relative_to(tmp_path / "dest").as_posix() for p in files] == [
        "rank0.json",
        "sub/log.txt",
    ]
    with pytest.raises(FetchError, match="no result directory"):
        fetch_dir("localhost", str(tmp_path / "none"), tmp_path / "d2", SshSite())
    for bad in ("/tmp/other", REMOTE_SCRATCH + "/../etc", "/"):
        with pytest.raises(ValueError, match="refusing to delete"):
            remove_remote_dir("localhost", bad, SshSite())
    assert remote_run_dir("r1", "gpu01") == f"{REMOTE_SCRATCH}/r1/gpu01"


def test_failure_reasons_from_launcher_output() -> None:
    torchrun = """
[rank1]: RuntimeError: [pair.cc:537] Read error [10.0.0.2]:26796: Connection reset by peer
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_23:37:05
  host      : gpu02
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 21452)
  traceback : Signal 9 (SIGKILL) received by PID 21452
============================================================
"""
    assert failure_reason(torchrun) == (
        "RuntimeError: [pair.cc:537] Read error [10.0.0.2]:26796: Connection reset by peer; "
        "rank 1 (local_rank: 0) host gpu02: exitcode -9 (pid: 21452)"
    )
    horovod = (
        "RuntimeError: Horovod detected that one or more processes exited\n"
        "Process name: 1\nExit code: 137\n"
    )
    assert failure_reason(horovod).endswith("; process name 1, exit code 137")
    assert failure_reason("just a line\n=====\n") == "just a line"
    assert failure_reason("") == "(no output)"
    assert len(failure_reason("ValueError: " + "x" * 1000)) == 400


def test_a_launch_tag_is_fresh_and_shell_safe() -> None:
    first, second = new_tag(), new_tag()
    assert first != second
    assert shlex.quote(first) == first


# ---------------------------------------------------------------- rows and report


def test_rows_record_where_a_run_ran_and_the_interface_it_used() -> None:
    config = config_for(["--model", "resnet18", "--launchers", "ddp"], cpu_machine())
    config = dataclasses.replace(config, cluster=ssh_launcher().cluster)
    spec = next(s for s in plan_sweep(config, "s", (), 2) if s.placement == TWO)
    assert spec.run_id == "ddp-n16-N2-fp32-nchw-r0"
    failed = ExecResult(
        1,
        False,
        3.0,
        "bench: gpu02: exited with rc=1: RuntimeError: boom\n",
        environ={"GLOO_SOCKET_IFNAME": "ens5"},
        hosts="gpu07:8,gpu09:8",
    )
    row = rows.run_row(spec, failed, "t")
    assert (row.status, row.nodes, row.gpus_per_node, row.gpus) == ("failed", 2, 8, 16)
    assert row.hosts == "gpu07:8,gpu09:8"  # where Slurm put it, not the plan's stand-ins
    assert "bench: gpu02: exited with rc=1: RuntimeError: boom" in row.error
    assert rows.describe_interconnect("gloo", ["a", "b"], "", failed.environ) == (
        "tcp (gloo, ens5)"
    )


def test_report_keeps_one_node_and_two_node_runs_of_equal_size_apart() -> None:
    rows = [
        run_row(throughput=100.0),
        run_row(run_id="ddp-n2-fp32-nchw-r0", gpus=2, gpus_per_node=2, throughput=190.0),
        run_row(
            run_id="ddp-n2-N2-fp32-nchw-r0", gpus=2, nodes=2, hosts="a:1,b:1", throughput=150.0
        ),
    ]
    points = report.summarise(rows, [])
    assert [(p.gpus, p.nodes, p.throughput) for p in points] == [
        (1, 1, 100.0),
        (2, 1, 190.0),
        (2, 2, 150.0),
    ]
    assert [round(p.efficiency, 2) for p in points] == [1.0, 0.95, 0.75]

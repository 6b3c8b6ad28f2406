"""The launchers' shared parts: the argv builders, the local backend, and the one stop policy.

The multi-node backend is in test_ssh.py and test_slurm.py; the test that every backend
runs exactly the builders' argv for the same spec is test_backends_agree.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine

import bench
from bench.launcher_kinds import TORCH_RANK
from bench.launchers import PROBE_MODULE, Launch, launch_of, rank_environment
from bench.launchers.argv import JOIN_TIMEOUT_S, Tools, free_port, node_argv
from bench.launchers.local import LocalLauncher, execute
from bench.launchers.stop import (
    StopPolicy,
    node_timeout_argv,
    stop_script,
    stop_tree,
)
from bench.plan import local_placement, plan_probes, plan_sweep
from bench.spec import HostSlots, ProbeSpec, RunSpec

TOOLS = Tools(python="/venv/bin/python", horovodrun="/venv/bin/horovodrun")
QUICK = StopPolicy(grace_s=1.0)


# ---------------------------------------------------------------- the argv builders


def launch(launcher: str, *placement: HostSlots, args: tuple[str, ...] = ()) -> Launch:
    return Launch("run1", launcher, "bench.rank.worker", args, placement, 1, "cpu")


def test_torchrun_argv() -> None:
    two = launch("ddp", HostSlots("node1", 8), HostSlots("node2", 8), args=("--spec", "X"))
    argv = node_argv(
        two,
        0,
        TOOLS,
        endpoint="node1:29400",
        local_addr="10.0.0.1",
        log_dir="/tmp/gpurig-bench/t/node1",
        network_interfaces="eth0",  # horovodrun's only
    )
    assert argv == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node1:29400",
        "--rdzv-id=run1",
        f"--rdzv-conf=is_host=1,join_timeout={JOIN_TIMEOUT_S}",
        "--max-restarts=0",
        "--local-addr=10.0.0.1",
        "--log-dir=/tmp/gpurig-bench/t/node1",
        "--tee=3",
        "--module",
        "bench.rank.worker",
        "--spec",
        "X",
    ]
    bare = node_argv(launch("ddp", HostSlots("h", 1)), 0, Tools("py"), endpoint="h:1")
    second = node_argv(two, 1, TOOLS, endpoint="node1:29400")
    assert "--rdzv-conf=is_host=1,join_timeout=300" in bare
    assert "--rdzv-conf=is_host=0,join_timeout=300" in second
    assert "--nnodes=1" in bare and "--nproc-per-node=1" in bare
    assert not [a for a in bare if a.startswith(("--local-addr", "--log-dir", "--tee"))]


def test_horovodrun_argv_uses_gloo_and_one_start_timeout_everywhere() -> None:
    two = launch("horovod", HostSlots("node1", 8), HostSlots("node2", 8), args=("--spec", "X"))
    argv = node_argv(
        two,
        0,
        TOOLS,
        endpoint="",
        local_addr="10.0.0.1",  # torchrun's only
        log_dir="/tmp/x",
        network_interfaces="eth0",
        ssh_port=2222,
        ssh_identity_file="/k/id",
    )
    assert argv == [
        "/venv/bin/horovodrun",
        "-np",
        "16",
        "-H",
        "node1:8,node2:8",
        "--gloo",
        "--start-timeout",
        str(JOIN_TIMEOUT_S),
        "--network-interfaces",
        "eth0",
        "-p",
        "2222",
        "--ssh-identity-file",
        "/k/id",
        "/venv/bin/python",
        "-m",
        "bench.rank.worker",
        "--spec",
        "X",
    ]
    local = node_argv(
        launch("horovod", HostSlots("localhost", 2)), 0, Tools("py", "h"), endpoint=""
    )
    assert local == [
        "h",
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        "--start-timeout",
        "300",
        "py",
        "-m",
        "bench.rank.worker",
    ]


def test_building_a_command_changes_nothing() -> None:
    config = config_for(["--gpus", "2"], cpu_machine())
    spec = next(s for s in plan_sweep(config, "s", local_placement(2), 2) if s.launcher == "ddp")
    launcher = LocalLauncher(TOOLS)
    before = dict(vars(launcher))
    first, second = (launcher.command(launch_of(spec), port=29500) for _ in range(2))
    assert first == second and vars(launcher) == before


# ---------------------------------------------------------------- what a spec asks for


def test_a_spec_is_read_once_into_a_launch() -> None:
    config = config_for(["--gpus", "2", "--launchers", "ddp,horovod"], cpu_machine())
    ddp, hvd = plan_sweep(config, "s", local_placement(2), 2)[:2]
    launch = launch_of(ddp)
    assert (launch.launch_id, launch.launcher, launch.module) == (ddp.run_id, "ddp", TORCH_RANK)
    assert RunSpec.decode(launch.args[1]) == ddp and launch.args[0] == "--spec"
    assert RunSpec.from_argv(launch.args, None) == ddp  # as the rank reads its command line
    assert launch_of(hvd).launcher == "horovod"
    (probe,) = plan_probes(config, "s", local_placement(2), 2)
    assert (launch_of(probe).launcher, launch_of(probe).module) == ("ddp", PROBE_MODULE)
    assert ProbeSpec.from_argv(launch_of(probe).args, None) == probe


def test_rank_environment_sets_threads_for_both_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    env = rank_environment(3, "cpu")
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "3"
    assert "NCCL_DEBUG" not in env
    assert rank_environment(1, "cuda")["NCCL_DEBUG"] == "INFO"
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the user's choice wins
    assert "NCCL_DEBUG" not in rank_environment(1, "cuda")
    # GPU ranks number GPUs in PCI order, as NVML does (telemetry finds TensorFlow's GPU:i)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert rank_environment(1, "cuda")["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_DEVICE_ORDER" not in env
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert "CUDA_DEVICE_ORDER" not in rank_environment(1, "cuda")


def test_ranks_import_the_bench_from_this_checkout_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # the checkout holding the running `bench` package, ahead of what the controller inherited
    checkout = str(Path(bench.__file__).resolve().parent.parent)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert rank_environment(1, "cpu")["PYTHONPATH"] == checkout
    monkeypatch.setenv("PYTHONPATH", "/opt/site-extra")
    assert rank_environment(1, "cpu")["PYTHONPATH"] == f"{checkout}{os.pathsep}/opt/site-extra"


# ---------------------------------------------------------------- the local backend


def test_local_commands_carry_the_spec_and_the_thread_share() -> None:
    config = config_for(["--gpus", "2"], cpu_machine())
    specs = plan_sweep(config, "s", local_placement(2), 2)
    ddp = LocalLauncher(TOOLS).command(launch_of(next(s for s in specs if s.launcher == "ddp")))
    assert ddp.argv[:3] == ("/venv/bin/python", "-m", "torch.distributed.run")
    assert ddp.env["OMP_NUM_THREADS"] == "1"
    hvd_spec = next(s for s in specs if s.launcher == "horovod")
    hvd = LocalLauncher(TOOLS).command(launch_of(hvd_spec))
    assert hvd.argv[:5] == ("/venv/bin/horovodrun", "-np", "2", "-H", "localhost:2")
    gpu = config_for(["--gpus", "4", "--launchers", "horovod"], gpu_machine(gpus=4))
    (spec,) = plan_sweep(gpu, "s", local_placement(4), cores_per_host=32)[:1]
    assert LocalLauncher(TOOLS).command(launch_of(spec)).env["OMP_NUM_THREADS"] == "8"


def test_local_launcher_refuses_other_hosts() -> None:
    config = config_for(["--gpus", "2"], cpu_machine())
    (spec,) = plan_sweep(config, "s", (HostSlots("node1", 1), HostSlots("node2", 1)), 2)[:1]
    with pytest.raises(ValueError, match="node1:1,node2:1"):
        LocalLauncher(TOOLS).command(launch_of(spec))


def test_execute_captures_output_and_status(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "run.log"
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = execute([sys.executable, "-c", code], {"X": "1"}, 30, log)
    assert (result.returncode, result.timed_out) == (3, False)
    assert "out" in result.output and "err" in result.output
    assert log.read_text() == result.output


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert 0 < port < 65536


# ---------------------------------------------------------------- the stop policy


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_dead(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


# A launcher whose child ignores the first signal and left its session (as torchrun's ranks do)
STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    'signal.signal(signal.SIGTERM, lambda *a: print("child got TERM", flush=True)); '
    "time.sleep(600)'], start_new_session=True)\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(600)\n"
)


def test_timeout_stops_the_whole_tree_term_then_kill(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    launcher = LocalLauncher(policy=QUICK)
    result = execute(
        [sys.executable, "-c", STUBBORN, str(pid_file)], {}, 3, tmp_path / "t.log", launcher.policy
    )
    assert result.timed_out and result.returncode is None
    assert "child got TERM" in result.output  # the first signal reached the detached child
    assert _wait_dead(int(pid_file.read_text()))  # and the last one ended it


def test_an_interrupt_while_the_child_starts_still_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C landing inside Popen (after the fork, before `proc` exists) is held until the
    child can be stopped, though another thread is there to take a process-wide signal (the
    controller has tqdm's); the handler in force before is the one that runs."""
    import bench.launchers.local as local

    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen_then_ctrl_c(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGINT)  # before Popen has returned
        return proc

    monkeypatch.setattr(local.subprocess, "Popen", popen_then_ctrl_c)
    other = threading.Thread(target=time.sleep, args=(5,), daemon=True)
    other.start()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            argv = [sys.executable, "-c", "import time; time.sleep(600)"]
            execute(argv, {}, 60, tmp_path / "i.log", QUICK)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    (proc,) = started
    assert proc.returncode is not None  # stopped and reaped, not left running


def test_stop_tree_with_another_policy_sends_its_signals(tmp_path: Path) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, lambda *a: print('INT', flush=True) or exit(0))\n"
        "print('ready', flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout and proc.stdout.readline() == "ready\n"
    stop_tree(proc, StopPolicy(grace_s=5, first=signal.SIGINT))
    assert proc.returncode == 0 and proc.stdout.read() == "INT\n"


def test_the_policy_reads_the_same_in_every_form() -> None:
    policy = StopPolicy(grace_s=7)
    assert node_timeout_argv(30, policy) == ["timeout", "--signal=TERM", "--kill-after=7s", "30s"]
    script = stop_script("TAG", "run-1", policy)
    assert "kill -TERM $pids" in script and "kill -KILL $pids" in script
    assert "end=$(($(date +%s) + 7))" in script  # the grace period before the last signal
    with pytest.raises(ValueError, match="unsafe run id"):
        stop_script("TAG", "x; rm -rf /", policy)

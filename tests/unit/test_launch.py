"""Command lines from placements, and running a prepared command with a deadline."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
from bench_builders import config_for, cpu_machine, gpu_machine

from bench import launch
from bench.plan import HostSlots, RunSpec, local_placement, plan_sweep

TOOLS = launch.Tools(python="/venv/bin/python", horovodrun="/venv/bin/horovodrun")
TWO_NODES = (HostSlots("node1", 8), HostSlots("node2", 8))


def test_torchrun_on_one_host() -> None:
    (command,) = launch.torchrun_commands(
        local_placement(2), "bench.worker", ["--spec", "X"],
        rdzv_id="run1", rdzv_endpoint="localhost:29500", env={"A": "1"}, tools=TOOLS,
    )  # fmt: skip
    assert command.host == "localhost"
    assert command.argv == (
        "/venv/bin/python", "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
        "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:29500", "--rdzv-id=run1",
        "--max-restarts=0", "--module", "bench.worker", "--spec", "X",
    )  # fmt: skip
    assert command.env == {"A": "1"}


def test_torchrun_on_two_hosts_meets_at_one_rendezvous() -> None:
    commands = launch.torchrun_commands(
        TWO_NODES, "bench.worker", [], rdzv_id="r", rdzv_endpoint="node1:29400", env={},
        tools=TOOLS,
    )  # fmt: skip
    assert [c.host for c in commands] == ["node1", "node2"]
    for c in commands:
        assert "--nnodes=2" in c.argv and "--nproc-per-node=8" in c.argv
        assert "--rdzv-endpoint=node1:29400" in c.argv


def test_horovodrun_starts_every_host_from_the_first() -> None:
    (command,) = launch.horovodrun_command(
        TWO_NODES, "bench.worker", ["--spec", "X"], env={}, tools=TOOLS
    )
    assert command.host == "node1"
    assert command.argv == (
        "/venv/bin/horovodrun", "-np", "16", "-H", "node1:8,node2:8", "--gloo",
        "--start-timeout", "120", "/venv/bin/python", "-m", "bench.worker", "--spec", "X",
    )  # fmt: skip


def test_rank_environment_sets_threads_for_both_launchers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    env = launch.rank_environment(3, "cpu")
    assert env["OMP_NUM_THREADS"] == "3" and env["MKL_NUM_THREADS"] == "3"
    assert "NCCL_DEBUG" not in env
    assert launch.rank_environment(1, "cuda")["NCCL_DEBUG"] == "INFO"
    monkeypatch.setenv("NCCL_DEBUG", "WARN")  # the user's choice wins
    assert "NCCL_DEBUG" not in launch.rank_environment(1, "cuda")


def test_commands_for_a_run_carry_its_spec() -> None:
    config = config_for(["--gpus", "2"], cpu_machine())
    spec = next(s for s in plan_sweep(config, "s", local_placement(2), 2) if s.launcher == "ddp")
    (ddp,) = launch.commands_for_run(spec, TOOLS)
    assert RunSpec.decode(ddp.argv[ddp.argv.index("--spec") + 1]) == spec
    assert ddp.env["OMP_NUM_THREADS"] == "1"
    hvd_spec = next(
        s for s in plan_sweep(config, "s", local_placement(2), 2) if s.launcher != "ddp"
    )
    (hvd,) = launch.commands_for_run(hvd_spec, TOOLS)
    assert hvd.argv[:5] == ("/venv/bin/horovodrun", "-np", "2", "-H", "localhost:2")
    assert hvd.env["OMP_NUM_THREADS"] == "1"


def test_gpu_runs_get_one_thread_share_per_rank() -> None:
    config = config_for(["--gpus", "4", "--launchers", "horovod"], gpu_machine(gpus=4))
    (spec,) = plan_sweep(config, "s", local_placement(4), cores_per_host=32)[:1]
    (command,) = launch.commands_for_run(spec, TOOLS)
    assert command.env["OMP_NUM_THREADS"] == "8"


def test_execute_captures_output_and_status(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "run.log"
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    result = launch.execute([sys.executable, "-c", code], {"X": "1"}, 30, log)
    assert (result.returncode, result.timed_out) == (3, False)
    assert "out" in result.output and "err" in result.output
    assert log.read_text() == result.output


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_timeout_kills_the_whole_tree_even_new_sessions(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # a child that starts a grandchild in its own session (as torchrun starts its ranks)
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    result = launch.execute([sys.executable, "-c", code], {}, 3, tmp_path / "t.log")
    assert result.timed_out and result.returncode is None
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_local_executor_refuses_other_hosts(tmp_path: Path) -> None:
    commands = launch.torchrun_commands(
        TWO_NODES, "m", [], rdzv_id="r", rdzv_endpoint="node1:1", env={}, tools=TOOLS
    )
    with pytest.raises(ValueError, match="node1, node2"):
        launch.run_local(commands, 1, tmp_path / "x.log")


def test_free_port_is_bindable() -> None:
    port = launch.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert 0 < port < 65536

"""Launching: command lines for torchrun and horovodrun from a placement, and running them.

`commands_for_run` / `commands_for_probe` turn a spec into `NodeCommand`s: one per host for
torchrun (each host runs its own torchrun agent, joined by a c10d rendezvous), a single one for
horovodrun (which starts the remote ranks itself). `execute` runs one prepared command with a
timeout, captures its output to a log file and kills the whole process tree on timeout or
Ctrl-C. An `Executor` runs a list of NodeCommands; `run_local` is the single-host one, and a
multi-host executor can wrap `execute` for each host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.plan import LOCAL_HOST, Placement, ProbeSpec, RunSpec, format_hosts

WORKER_MODULE = "bench.worker"
PROBE_MODULE = "bench.probe"
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class NodeCommand:
    """A command to run on `host`, with the environment variables it needs on top of the host's."""

    host: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    returncode: int | None  # None when killed on timeout
    timed_out: bool
    wall_s: float
    output: str  # stdout and stderr, interleaved as written
    log_path: Path
    # What only a multi-node executor knows: the interface variables the ranks got (for the
    # interconnect column; empty means this process's environment) and, under Slurm, the hosts
    # the job actually ran on ("" means the planned placement).
    environ: Mapping[str, str] = field(default_factory=dict)
    hosts: str = ""


Executor = Callable[[Sequence[NodeCommand], float, Path], ExecResult]


def _default_horovodrun() -> str:
    """The horovodrun of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("horovodrun")
    return str(beside) if beside.exists() else shutil.which("horovodrun") or str(beside)


@dataclass(frozen=True)
class Tools:
    """Where the launchers live; a remote executor may point these at another host's paths."""

    python: str = sys.executable
    horovodrun: str = field(default_factory=_default_horovodrun)


class Cluster(Protocol):
    """What a multi-node executor (bench.remote.SshCluster, bench.slurm.SlurmCluster) adds to
    the commands: the launchers' paths on the nodes, the rendezvous port, and per-node torchrun
    options and environment that only the nodes themselves can tell (address, interface)."""

    tools: Tools
    rdzv_port: int

    def torchrun_args(self, placement: Placement) -> Mapping[str, Sequence[str]]: ...

    def node_env(self, placement: Placement) -> Mapping[str, Mapping[str, str]]: ...

    def horovodrun_args(self, placement: Placement) -> Sequence[str]: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_environment(threads: int, device: str) -> dict[str, str]:
    """Variables every rank gets, whichever launcher starts it.

    Threads per rank are set explicitly for both launchers (torchrun would force 1,
    horovodrun leaves one thread per core in every rank). NCCL_DEBUG=INFO makes NCCL name the
    transport it picked (P2P, SHM, NET/IB, NET/Socket), which becomes the interconnect column;
    a user's own NCCL_DEBUG wins.
    """
    env = {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
        ),
    }
    if device == "cuda" and "NCCL_DEBUG" not in os.environ:
        env["NCCL_DEBUG"] = "INFO"
    return env


def torchrun_commands(
    placement: Placement,
    module: str,
    args: Sequence[str],
    *,
    rdzv_id: str,
    rdzv_endpoint: str,
    env: Mapping[str, str],
    tools: Tools,
    node_args: Mapping[str, Sequence[str]] | None = None,
    node_env: Mapping[str, Mapping[str, str]] | None = None,
) -> list[NodeCommand]:
    """One torchrun agent per host; all join the c10d rendezvous at `rdzv_endpoint`.

    node_args/node_env: extra torchrun options and variables for each host (multi-node)."""
    commands = []
    for node in placement:
        argv = (
            tools.python, "-m", "torch.distributed.run",
            f"--nnodes={len(placement)}",
            f"--nproc-per-node={node.slots}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv_endpoint}",
            f"--rdzv-id={rdzv_id}",
            "--max-restarts=0",
            *(node_args or {}).get(node.host, ()),
            "--module", module, *args,
        )  # fmt: skip
        host_env = {**env, **(node_env or {}).get(node.host, {})}
        commands.append(NodeCommand(node.host, argv, host_env))
    return commands


def horovodrun_command(
    placement: Placement,
    module: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    tools: Tools,
    start_timeout_s: int = 120,
    extra_args: Sequence[str] = (),
) -> list[NodeCommand]:
    """One horovodrun (Gloo controller) on the first host; it starts every rank (-H host:slots).

    extra_args: more horovodrun options (multi-node: its ssh port and key, the interfaces)."""
    world = sum(h.slots for h in placement)
    argv = (
        tools.horovodrun,
        "-np", str(world),
        "-H", format_hosts(placement),
        "--gloo",
        "--start-timeout", str(start_timeout_s),
        *extra_args,
        tools.python, "-m", module, *args,
    )  # fmt: skip
    return [NodeCommand(placement[0].host, argv, env)]


def _rendezvous(placement: Placement, cluster: Cluster | None) -> str:
    host = placement[0].host
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    return f"{host}:{cluster.rdzv_port if cluster else free_port()}"


def _torchrun(
    placement: Placement, module: str, args: Sequence[str], rdzv_id: str,
    env: Mapping[str, str], tools: Tools | None, cluster: Cluster | None,
) -> list[NodeCommand]:  # fmt: skip
    return torchrun_commands(
        placement, module, args, rdzv_id=rdzv_id, rdzv_endpoint=_rendezvous(placement, cluster),
        env=env, tools=cluster.tools if cluster else tools or Tools(),
        node_args=cluster.torchrun_args(placement) if cluster else None,
        node_env=cluster.node_env(placement) if cluster else None,
    )  # fmt: skip


def commands_for_run(
    spec: RunSpec, tools: Tools | None = None, cluster: Cluster | None = None
) -> list[NodeCommand]:
    env = rank_environment(spec.threads_per_rank, spec.workload.device)
    args = ["--spec", spec.encode()]
    if spec.launcher == "ddp":
        return _torchrun(spec.placement, WORKER_MODULE, args, spec.run_id, env, tools, cluster)
    if spec.launcher == "horovod":
        if cluster:
            env = {**env, **cluster.node_env(spec.placement).get(spec.placement[0].host, {})}
        return horovodrun_command(
            spec.placement, WORKER_MODULE, args, env=env,
            tools=cluster.tools if cluster else tools or Tools(),
            extra_args=cluster.horovodrun_args(spec.placement) if cluster else (),
        )  # fmt: skip
    raise ValueError(f"unknown launcher {spec.launcher!r}")


def commands_for_probe(
    spec: ProbeSpec, tools: Tools | None = None, cluster: Cluster | None = None
) -> list[NodeCommand]:
    env = rank_environment(spec.threads_per_rank, spec.device)
    args = ["--spec", spec.encode()]
    return _torchrun(spec.placement, PROBE_MODULE, args, spec.probe_id, env, tools, cluster)


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (torchrun starts its ranks in sessions of their own, so
    signalling torchrun's process group alone would orphan them)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name (field 2) may contain spaces; ppid is the 2nd field after it
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def terminate_tree(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the launcher and all its descendants, then SIGKILL whatever outlives `grace_s`."""
    tree = [proc.pid, *_children(proc.pid)]
    _signal_all(tree, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    survivors = [pid for pid in tree if Path(f"/proc/{pid}").exists()]
    _signal_all([*survivors, *_children(proc.pid)], signal.SIGKILL)
    proc.wait()
    # a descendant reparented to init may outlive its parent for a moment: wait for it
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in survivors):
        time.sleep(0.05)


def execute(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float, log_path: Path
) -> ExecResult:
    """Run one prepared command; capture stdout+stderr in `log_path`; kill the tree on timeout.

    On KeyboardInterrupt the tree is killed too and the interrupt propagates, so the caller can
    record the run as interrupted. The child runs in its own session: a terminal's Ctrl-C reaches
    only the sweep, which decides what to stop.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            terminate_tree(proc)
        except BaseException:
            terminate_tree(proc)
            raise
    wall = time.monotonic() - started
    output = log_path.read_text(errors="replace")
    return ExecResult(None if timed_out else proc.returncode, timed_out, wall, output, log_path)


def run_local(commands: Sequence[NodeCommand], timeout_s: float, log_path: Path) -> ExecResult:
    """The single-host executor: exactly one command, on this machine."""
    if len(commands) != 1 or commands[0].host != LOCAL_HOST:
        hosts = ", ".join(c.host for c in commands)
        raise ValueError(f"run_local runs one command on {LOCAL_HOST}, got hosts: {hosts}")
    return execute(commands[0].argv, commands[0].env, timeout_s, log_path)

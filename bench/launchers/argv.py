"""The torchrun and horovodrun command lines: built here, once, for every backend.

`node_argv` is one node's command line for a launch: its torchrun agent (all nodes meet at a
c10d rendezvous), the one horovodrun that starts every rank (-H host:slots), a process started
without a launcher (DataParallel's single process, a TensorFlow worker on each node, which
finds the others through TF_CONFIG), or the per-gpu launcher's spawner on each node, one
independent rank per GPU. The local and multi-node backends call it with their own values: this
machine and a free port, or the surveyed nodes' addresses.

Pure functions of their arguments: building a command changes nothing and starts nothing.
"""

from __future__ import annotations

import shutil
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bench.launcher_kinds import TENSORFLOW_PACKAGE, Argv
from bench.launchers.per_gpu import MODULE as PER_GPU_MODULE

if TYPE_CHECKING:
    from bench.launchers import Launch
    from bench.launchers.stop import StopPolicy

# How long the nodes wait for each other to join: torchrun's c10d rendezvous join_timeout and
# horovodrun's --start-timeout, the same on every backend.
JOIN_TIMEOUT_S = 300


def _default_horovodrun() -> str:
    """The horovodrun of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).with_name("horovodrun")
    return str(beside) if beside.exists() else shutil.which("horovodrun") or str(beside)


@dataclass(frozen=True)
class Tools:
    """Where the launchers live: this environment's, or the nodes' (--remote-python)."""

    python: str = sys.executable
    horovodrun: str = field(default_factory=_default_horovodrun)
    tensorflow: str = ""  # the interpreter with TensorFlow when not `python` (bench.machine)


class Enclosure(Protocol):
    """What a wrapped command started around its processes (bench.launchers.docker's
    RunningContainer), stopped before them."""

    def stop(self, policy: StopPolicy) -> None:
        """Stop it from this machine."""

    def stop_lines(self, policy: StopPolicy) -> str:
        """sh lines that stop it on its node, run before the node's stop script."""


@dataclass(frozen=True)
class NodeCommand:
    """A command to run on `host`, with the environment variables it needs on top of the host's."""

    host: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    enclosure: Enclosure | None = None  # what a wrapper started around it, for stopping


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendezvous_endpoint(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # brackets: an IPv6 address


def node_argv(
    launch: Launch,
    index: int,
    tools: Tools,
    *,
    endpoint: str,
    local_addr: str = "",
    log_dir: str = "",
    network_interfaces: str = "",
    ssh_port: int | None = None,
    ssh_identity_file: str | None = None,
) -> list[str]:
    """Node `index`'s command line for `launch`, the same on every backend: the one process of a
    launcher without one, the per-gpu spawner (the slots of the nodes before it come first),
    horovodrun, which the first node runs for every rank, or its torchrun agent.

    horovodrun reaches the other nodes over its own ssh (ssh_port, ssh_identity_file) and uses
    the Gloo controller on every backend (the environment check requires Horovod built with
    Gloo; GPU tensors still go through NCCL). Each node's torchrun agent meets the others at
    `endpoint` (the first node hosts the c10d store), advertises `local_addr` to them
    (multi-node), and also writes each rank's output to log_dir on the node (--tee=3 keeps the
    console copy).
    """
    node = launch.placement[index]
    kind = launch.kind
    module = ["-m", launch.module, *launch.args]
    if kind.argv in (Argv.PLAIN, Argv.PER_NODE):  # no launcher: it drives its node's GPUs
        tensorflow = kind.framework == TENSORFLOW_PACKAGE
        return [(tools.tensorflow or tools.python) if tensorflow else tools.python, *module]
    if kind.argv is Argv.PER_GPU:  # the spawner (bench.launchers.per_gpu), one rank per GPU
        first_slot = sum(n.slots for n in launch.placement[:index])
        gpus = ["--gpus", str(node.slots), "--first-slot", str(first_slot)]
        return [tools.python, "-m", PER_GPU_MODULE, *gpus, "--", tools.python, *module]
    if kind.argv is Argv.HOROVODRUN:
        argv = [tools.horovodrun, "-np", str(launch.world_size), "-H", launch.hosts, "--gloo"]
        argv += ["--start-timeout", str(JOIN_TIMEOUT_S)]
        if network_interfaces:
            argv += ["--network-interfaces", network_interfaces]
        if ssh_port is not None:
            argv += ["-p", str(ssh_port)]
        if ssh_identity_file:
            argv += ["--ssh-identity-file", ssh_identity_file]
        return [*argv, tools.python, *module]
    argv = [
        tools.python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={launch.nodes}",
        f"--nproc-per-node={node.slots}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={launch.launch_id}",
        f"--rdzv-conf=is_host={int(index == 0)},join_timeout={JOIN_TIMEOUT_S}",
        "--max-restarts=0",
    ]
    if local_addr:
        argv.append(f"--local-addr={local_addr}")
    if log_dir:
        argv += [f"--log-dir={log_dir}", "--tee=3"]
    return [*argv, "--module", launch.module, *launch.args]

"""The launcher interface: one spec (a run or a probe), a timeout and a log path in, an
`ExecResult` out.

Two backends implement it, and both build their command lines with the same argv builders
(bench.launchers.argv) and stop what they started with the same stop policy
(bench.launchers.stop):

- `bench.launchers.local.LocalLauncher`: this machine (torchrun or horovodrun as a child).
- `bench.launchers.cluster.ClusterLauncher`: several nodes, reached through a site
  (bench.launchers.sites: ssh for --hosts, srun steps in the allocation for --slurm): one
  torchrun per node, or horovodrun on the first node.

What a spec asks for is read from the spec once (`launch_of`); nothing parses a built command
line back.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.launcher_kinds import DDP, LauncherKind, launcher_kind
from bench.paths import REPO_ROOT, bench_pythonpath
from bench.shared.lifeline import DIE_WITH_PARENT_VAR
from bench.spec import SYNTHETIC, Placed, Placement, ProbeSpec, RunSpec

PROBE_MODULE = "bench.rank.probe"
# Every process of a multi-node launch carries RUN_TAG_VAR=<tag> in its environment (horovodrun
# forwards its environment to remote ranks): stopping a launch
# finds its processes on each node by that exact value, and nothing else.
RUN_TAG_VAR = "GPURIG_BENCH_RUN"
# Every process of a launch also carries SWEEP_TAG_VAR=<sweep id>, wherever it runs (this machine,
# a --hosts node, its container, a Slurm node): a resumed sweep finds and stops what an earlier
# controller of the same sweep left running, here and on every node of the sweep.
SWEEP_TAG_VAR = "GPURIG_BENCH_SWEEP"
# The collective libraries' settings: they change distributed results (recorded with each sweep,
# bench.machine) and, with the bench's own BENCH_*, reach every rank wherever it runs (another
# node, a container) as they reach local ranks.
COLLECTIVE_PREFIXES = ("NCCL_", "GLOO_", "HOROVOD_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
FORWARDED_PREFIXES = (*COLLECTIVE_PREFIXES, "BENCH_")


class RemoteError(RuntimeError):
    """A problem with the other nodes that stops a multi-node run before or after it ran."""


@dataclass(frozen=True)
class ExecResult:
    returncode: int | None  # None when stopped on timeout
    timed_out: bool
    wall_s: float
    output: str  # stdout and stderr, interleaved as written
    # What only a multi-node backend knows: the interface variables the ranks got (for the
    # interconnect column; empty means this process's environment) and the hosts the launch
    # actually ran on ("" means the planned placement; under Slurm the allocation's nodes).
    environ: Mapping[str, str] = field(default_factory=dict)
    hosts: str = ""


@dataclass(frozen=True)
class Launch(Placed):
    """What one spec asks the launchers for, read from the spec in one place."""

    launch_id: str  # the run id or the probe id
    launcher: str  # a name in bench.launcher_kinds; probes always use torchrun (ddp)
    module: str  # the rank entry point, run as python -m MODULE (the kind's, or the probe)
    args: tuple[str, ...]
    placement: Placement
    threads_per_rank: int
    device: str
    image: str = ""  # what the sweep's wrapper runs every rank in (--container); "" on the host
    data: str = ""  # a --data directory the ranks read ("" for synthetic data)
    sweep_id: str = ""  # the sweep it belongs to (SWEEP_TAG_VAR)

    @property
    def kind(self) -> LauncherKind:
        return launcher_kind(self.launcher)


def launch_of(spec: RunSpec | ProbeSpec) -> Launch:
    args = ("--spec", spec.encode())
    if isinstance(spec, ProbeSpec):
        return Launch(
            spec.probe_id,
            DDP.name,
            PROBE_MODULE,
            args,
            spec.placement,
            spec.threads_per_rank,
            spec.device,
            sweep_id=spec.sweep_id,
        )
    kind = launcher_kind(spec.launcher)  # ValueError for an unknown launcher
    data = spec.workload.data if spec.workload.data != SYNTHETIC else ""
    return Launch(
        spec.run_id,
        spec.launcher,
        kind.module,
        args,
        spec.placement,
        spec.threads_per_rank,
        spec.workload.device,
        spec.image,
        data,
        spec.sweep_id,
    )


class Launcher(Protocol):
    """Runs one spec to completion (or until timeout_s), output captured in log_path."""

    def run(self, spec: RunSpec | ProbeSpec, timeout_s: float, log_path: Path) -> ExecResult: ...


def rank_environment(threads: int, device: str, sweep_id: str = "") -> dict[str, str]:
    """Variables every rank gets, whichever launcher and backend starts it.

    sweep_id: the sweep's tag (SWEEP_TAG_VAR), set here once for every backend.

    Threads per rank are set explicitly for both launchers (torchrun would force 1,
    horovodrun leaves one thread per core in every rank). NCCL_DEBUG=INFO makes NCCL name the
    transport it picked (P2P, SHM, NET/IB, NET/Socket), which becomes the interconnect column;
    a user's own NCCL_DEBUG wins.
    """
    env = {
        DIE_WITH_PARENT_VAR: "1",  # each rank dies with its launcher (bench.shared.lifeline)
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": bench_pythonpath(REPO_ROOT, os.environ.get("PYTHONPATH")),
    }
    if device == "cuda" and "NCCL_DEBUG" not in os.environ:
        env["NCCL_DEBUG"] = "INFO"
    if device == "cuda" and "CUDA_DEVICE_ORDER" not in os.environ:
        # GPUs numbered as nvidia-smi and NVML number them (CUDA's default is fastest first:
        # CUDA Programming Guide, "CUDA Environment Variables", checked 2026-11-25), so a
        # rank's GPU i is NVML's (bench.shared.telemetry.visible_nvml_handle)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if sweep_id:
        env[SWEEP_TAG_VAR] = sweep_id
    return env


def new_tag(prefix: str = "gsb") -> str:
    """A fresh, shell-safe tag for one multi-node launch (RUN_TAG_VAR's value)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def socket_ifname_var(gpu: bool) -> str:
    """The variable that pins the collective library to an interface."""
    return "NCCL_SOCKET_IFNAME" if gpu else "GLOO_SOCKET_IFNAME"

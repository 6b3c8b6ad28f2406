"""Planning: which runs a sweep consists of, and where each one's ranks go.

Everything here is pure data and arithmetic (no torch import, no processes), so the launcher,
the per-rank worker and the tests share one description of a run: a `RunSpec`.

A run's ranks are described by a `Placement`: an ordered tuple of `HostSlots` (host, ranks on
that host). A single-host sweep uses `local_placement`; a multi-host sweep fills the hosts it
was given in order with `place_ranks`, so the fewest hosts carry each configuration.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.config import BenchConfig

LAUNCHERS = ("ddp", "horovod")
PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16")
MEMORY_FORMATS = ("nchw", "channels_last")
LOCAL_HOST = "localhost"
SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class HostSlots:
    """One host of a placement and how many ranks (GPUs, or CPU processes) it runs."""

    host: str
    slots: int

    def __str__(self) -> str:
        return f"{self.host}:{self.slots}"


Placement = tuple[HostSlots, ...]


def local_placement(ranks: int) -> Placement:
    """All ranks on this machine: the default when no hosts are given."""
    return (HostSlots(LOCAL_HOST, ranks),)


def place_ranks(ranks: int, hosts: Sequence[HostSlots]) -> Placement:
    """Fill `hosts` in order with `ranks` ranks, so a configuration spans as few hosts as it can."""
    if ranks < 1:
        raise ValueError(f"a run needs at least one rank, got {ranks}")
    placement: list[HostSlots] = []
    left = ranks
    for host in hosts:
        if left == 0:
            break
        take = min(host.slots, left)
        placement.append(HostSlots(host.host, take))
        left -= take
    if left:
        total = sum(h.slots for h in hosts)
        raise ValueError(f"{ranks} ranks do not fit on {total} slots ({format_hosts(hosts)})")
    return tuple(placement)


def format_hosts(placement: Sequence[HostSlots]) -> str:
    """The horovodrun -H spelling of a placement: "node1:8,node2:8"."""
    return ",".join(str(h) for h in placement)


def default_rank_counts(max_ranks: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to `max_ranks`, ending with `max_ranks` itself if it is not a power of 2."""
    if max_ranks < 1:
        raise ValueError(f"need at least one rank, got {max_ranks}")
    counts = []
    n = 1
    while n <= max_ranks:
        counts.append(n)
        n *= 2
    if counts[-1] != max_ranks:
        counts.append(max_ranks)
    return tuple(counts)


def threads_per_rank(cores: int, ranks_on_host: int) -> int:
    """CPU threads each rank may use so the ranks on one host do not oversubscribe its cores.

    torchrun sets OMP_NUM_THREADS=1 and horovodrun sets nothing (each rank then starts one
    thread per core: two ranks on two cores ran 5x slower), so both launchers get this value.
    """
    return max(1, cores // max(1, ranks_on_host))


@dataclass(frozen=True)
class Variant:
    """The knobs a sweep may A/B (each a comma list on the command line); part of the run id."""

    precision: str
    channels_last: bool
    compile: bool

    @property
    def label(self) -> str:
        layout = "channels_last" if self.channels_last else "nchw"
        return f"{self.precision}-{layout}" + ("-compile" if self.compile else "")


@dataclass(frozen=True)
class Workload:
    """What every run of a sweep trains, and the knobs that are fixed for the whole sweep."""

    model: str
    image_size: int
    num_classes: int
    data: str  # SYNTHETIC or an ImageFolder root
    loader_workers: int
    warmup_steps: int
    timed_steps: int
    bucket_cap_mb: float
    static_graph: bool
    gradient_as_bucket_view: bool
    broadcast_buffers: bool
    fp16_allreduce: bool
    device: str  # "cuda" or "cpu"
    seed: int


@dataclass(frozen=True)
class RunSpec:
    """One launch: a launcher, a placement, a variant and a repeat index."""

    sweep_id: str
    run_id: str
    launcher: str
    repeat: int
    placement: Placement
    variant: Variant
    workload: Workload
    batch_per_gpu: int
    scaling: str  # "weak": per-GPU batch fixed; "strong": global batch fixed
    threads_per_rank: int

    @property
    def world_size(self) -> int:
        return sum(h.slots for h in self.placement)

    @property
    def nodes(self) -> int:
        return len(self.placement)

    @property
    def gpus_per_node(self) -> int:
        return max(h.slots for h in self.placement)

    @property
    def hosts(self) -> str:
        return format_hosts(self.placement)

    @property
    def global_batch(self) -> int:
        return self.batch_per_gpu * self.world_size

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        fields = dict(data)
        fields["placement"] = tuple(HostSlots(**h) for h in data["placement"])
        fields["variant"] = Variant(**data["variant"])
        fields["workload"] = Workload(**data["workload"])
        return cls(**fields)

    def encode(self) -> str:
        """One shell-safe argument (URL-safe base64 of JSON): survives ssh and horovodrun."""
        raw = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> RunSpec:
        return cls.from_dict(json.loads(base64.urlsafe_b64decode(text.encode("ascii"))))


@dataclass(frozen=True)
class ProbeSpec:
    """An allreduce bandwidth probe over the same placement as the runs with that many ranks."""

    sweep_id: str
    probe_id: str
    placement: Placement
    nbytes: int
    iterations: int
    device: str
    threads_per_rank: int

    @property
    def world_size(self) -> int:
        return sum(h.slots for h in self.placement)

    @property
    def hosts(self) -> str:
        return format_hosts(self.placement)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeSpec:
        fields = dict(data)
        fields["placement"] = tuple(HostSlots(**h) for h in data["placement"])
        return cls(**fields)

    def encode(self) -> str:
        raw = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> ProbeSpec:
        return cls.from_dict(json.loads(base64.urlsafe_b64decode(text.encode("ascii"))))


def variants(config: BenchConfig) -> list[Variant]:
    return [
        Variant(precision=p, channels_last=(m == "channels_last"), compile=c)
        for p in config.precisions
        for m in config.memory_formats
        for c in config.compile_modes
    ]


def workload(config: BenchConfig) -> Workload:
    return Workload(
        model=config.model,
        image_size=config.image_size,
        num_classes=config.num_classes,
        data=config.data,
        loader_workers=config.loader_workers,
        warmup_steps=config.warmup_steps,
        timed_steps=config.steps,
        bucket_cap_mb=config.bucket_cap_mb,
        static_graph=config.static_graph,
        gradient_as_bucket_view=config.gradient_as_bucket_view,
        broadcast_buffers=config.broadcast_buffers,
        fp16_allreduce=config.fp16_allreduce,
        device=config.device,
        seed=config.seed,
    )


def batch_per_gpu(config: BenchConfig, ranks: int) -> int:
    """Weak scaling keeps the per-GPU batch; strong scaling splits a fixed global batch."""
    if config.global_batch is not None:
        return config.global_batch // ranks
    return config.batch_size


def run_id(launcher: str, ranks: int, variant: Variant, repeat: int, nodes: int = 1) -> str:
    """Deterministic, so a resumed sweep recognises the runs it already has. Multi-node runs
    add their node count: ddp-n2-... is 2 ranks on one node, ddp-n2-N2-... one on each of 2."""
    spread = f"-N{nodes}" if nodes > 1 else ""
    return f"{launcher}-n{ranks}{spread}-{variant.label}-r{repeat}"


def placements(config: BenchConfig, hosts: Sequence[HostSlots]) -> list[Placement]:
    """Each configuration's placement: a multi-node sweep's node-count x GPUs-per-node grid
    (bench.hosts.ClusterConfig), else every GPU count filled onto `hosts`."""
    if config.cluster is not None:
        return config.cluster.placements()
    return [place_ranks(ranks, hosts) for ranks in config.gpu_counts]


def plan_sweep(
    config: BenchConfig, sweep_id: str, hosts: Sequence[HostSlots], cores_per_host: int
) -> list[RunSpec]:
    """Every run of the sweep, in execution order.

    Repeats are the outer loop and launchers alternate inside it, so slow drift on a shared
    machine (other jobs, clocks, heat) spreads over all configurations instead of biasing the
    ones that happened to run last.
    """
    load = workload(config)
    scaling = "strong" if config.global_batch is not None else "weak"
    specs = []
    for repeat in range(config.repeats):
        for variant in variants(config):
            for launcher in config.launchers:
                for placement in placements(config, hosts):
                    ranks = sum(h.slots for h in placement)
                    specs.append(
                        RunSpec(
                            sweep_id=sweep_id,
                            run_id=run_id(launcher, ranks, variant, repeat, len(placement)),
                            launcher=launcher,
                            repeat=repeat,
                            placement=placement,
                            variant=variant,
                            workload=load,
                            batch_per_gpu=batch_per_gpu(config, ranks),
                            scaling=scaling,
                            threads_per_rank=threads_per_rank(
                                cores_per_host, max(h.slots for h in placement)
                            ),
                        )
                    )
    return specs


def plan_probes(
    config: BenchConfig, sweep_id: str, hosts: Sequence[HostSlots], cores_per_host: int
) -> list[ProbeSpec]:
    """One allreduce probe per placement of more than one rank (a single rank communicates
    nothing)."""
    if not config.probe:
        return []
    probes = []
    for placement in placements(config, hosts):
        ranks = sum(h.slots for h in placement)
        if ranks < 2:
            continue
        spread = f"-N{len(placement)}" if len(placement) > 1 else ""
        probes.append(
            ProbeSpec(
                sweep_id=sweep_id,
                probe_id=f"allreduce-n{ranks}{spread}",
                placement=placement,
                nbytes=int(config.probe_mb * 1e6),
                iterations=config.probe_iterations,
                device=config.device,
                threads_per_rank=threads_per_rank(cores_per_host, max(h.slots for h in placement)),
            )
        )
    return probes

"""Planning: which runs a sweep consists of, and where each one's ranks go.

Pure arithmetic (no torch import, no processes): a configuration in, the sweep's `RunSpec`s and
`ProbeSpec`s (bench.spec, the description of a run the launchers and the ranks share) out.

A run's ranks are described by a `Placement`: an ordered tuple of `HostSlots` (host, ranks on
that host). A single-host sweep uses `local_placement`; a multi-host sweep fills the hosts it
was given in order with `place_ranks`, so the fewest hosts carry each configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.launcher_kinds import TENSORFLOW_PACKAGE, launcher_kind
from bench.paths import SweepPaths
from bench.shared import tf_rules
from bench.spec import (
    LOCAL_HOST,
    SYNTHETIC,
    HostSlots,
    Placement,
    ProbeSpec,
    RunSpec,
    Variant,
    format_hosts,
    most_slots,
    total_slots,
)

if TYPE_CHECKING:
    from bench.config import BenchConfig


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
        total = total_slots(hosts)
        raise ValueError(f"{ranks} ranks do not fit on {total} slots ({format_hosts(hosts)})")
    return tuple(placement)


def threads_per_rank(cores: int, ranks_on_host: int) -> int:
    """CPU threads each rank may use so the ranks on one host do not oversubscribe its cores.

    torchrun sets OMP_NUM_THREADS=1 and horovodrun sets nothing (each rank then starts one
    thread per core: two ranks on two cores ran 5x slower), so both launchers get this value.
    """
    return max(1, cores // max(1, ranks_on_host))


def batch_per_gpu(config: BenchConfig, ranks: int, grad_accum: int = 1) -> int:
    """Weak scaling keeps the per-GPU batch; strong scaling splits a fixed global batch (images
    per optimizer step) over the GPUs and each step's `grad_accum` micro-batches."""
    if config.global_batch is not None:
        return config.global_batch // (ranks * grad_accum)
    return config.batch_size


def size_label(placement: Placement) -> str:
    """A placement in run and probe ids: "n2" is 2 ranks on one node, "n2-N2" one on each of 2."""
    spread = f"-N{len(placement)}" if len(placement) > 1 else ""
    return f"n{total_slots(placement)}{spread}"


def run_id(launcher: str, placement: Placement, variant: Variant, repeat: int) -> str:
    """Deterministic, so a resumed sweep recognises the runs it already has."""
    return f"{launcher}-{size_label(placement)}-{variant.label}-r{repeat}"


def placements(config: BenchConfig, hosts: Sequence[HostSlots]) -> list[Placement]:
    """Each configuration's placement: a multi-node sweep's node-count x GPUs-per-node grid
    (bench.hosts.ClusterConfig), else every GPU count filled onto `hosts`."""
    if config.cluster is not None:
        return config.cluster.placements()
    return [place_ranks(ranks, hosts) for ranks in config.gpu_counts]


def why_not_runnable(spec: RunSpec) -> str:
    """Why a planned run cannot be launched as asked ("" when it can): limits of a launcher that
    hold for some configurations only. Such runs become `unavailable` rows with this reason."""
    kind = launcher_kind(spec.launcher)
    if kind.framework == TENSORFLOW_PACKAGE:
        return tf_rules.why_not_runnable(spec) or ""
    if spec.variant.compile and not kind.compile:
        return (
            "torch.compile is not applied under nn.DataParallel (it re-replicates the model in "
            f"threads on every forward, which Dynamo does not trace); compare {kind.name} with "
            "--compile off"
        )
    if spec.workload.device == "cpu" and spec.world_size > 1 and not kind.process_per_gpu:
        return (
            "nn.DataParallel splits batches over GPUs; on CPU it has one device, so it runs at "
            "1 rank only"
        )
    return ""


def launcher_variant(launcher: str, variant: Variant, data: str) -> Variant:
    """The variant as `launcher` runs it: a CPU sweep without --memory-format (no layout: None)
    runs each launcher in its framework's layout there; the tf launcher reads --data through
    tf.data whatever --loader says (--loader picks the torch launchers' input pipeline)."""
    kind = launcher_kind(launcher)
    if variant.channels_last is None:
        variant = dataclasses.replace(variant, channels_last=kind.cpu_channels_last)
    if kind.framework == TENSORFLOW_PACKAGE and data != SYNTHETIC:
        return dataclasses.replace(variant, loader=tf_rules.TF_DATA_LOADER)
    return variant


def plan_sweep(
    config: BenchConfig, sweep_id: str, hosts: Sequence[HostSlots], cores_per_host: int
) -> list[RunSpec]:
    """Every run of the sweep, in execution order.

    Repeats are the outer loop and launchers alternate inside it, so slow drift on a shared
    machine (other jobs, clocks, heat) spreads over all configurations instead of biasing the
    ones that happened to run last. With --profile, the first repeat of each configuration
    also traces a few steps after its timed window (`trace_path`, a file name that the sweep
    places in its logs directory).
    """
    load = config.workload
    scaling = "strong" if config.global_batch is not None else "weak"
    every = placements(config, hosts)
    # the per-gpu check runs only the largest: every GPU of every node at once, a row per GPU
    largest = [max(every, key=total_slots)]
    specs, planned = [], set()
    for repeat in range(config.repeats):
        for asked in config.variants():
            for launcher in config.launchers:
                kind = launcher_kind(launcher)
                variant = launcher_variant(launcher, asked, load.data)
                for placement in largest if kind.independent else every:
                    ranks = total_slots(placement)
                    # per node: DataParallel is one process however many GPUs it drives
                    processes = kind.processes(most_slots(placement))
                    rid = run_id(launcher, placement, variant, repeat)
                    if rid in planned:  # tf's runs of every --loader are one
                        continue
                    planned.add(rid)
                    specs.append(
                        RunSpec(
                            sweep_id=sweep_id,
                            run_id=rid,
                            launcher=launcher,
                            repeat=repeat,
                            placement=placement,
                            variant=variant,
                            workload=load,
                            batch_per_gpu=batch_per_gpu(config, ranks, variant.grad_accum),
                            scaling=scaling,
                            threads_per_rank=threads_per_rank(cores_per_host, processes),
                            trace_path=SweepPaths.trace_name(rid)
                            if load.profile and repeat == 0
                            else "",
                        )
                    )
    return specs


def plan_probes(
    config: BenchConfig, sweep_id: str, hosts: Sequence[HostSlots], cores_per_host: int
) -> list[ProbeSpec]:
    """One allreduce probe per placement of more than one rank (a single rank communicates
    nothing), unless every launcher's ranks run alone (the per-gpu check)."""
    if not config.allreduce_probe or all(launcher_kind(x).independent for x in config.launchers):
        return []
    probes = []
    for placement in placements(config, hosts):
        if total_slots(placement) < 2:
            continue
        probes.append(
            ProbeSpec(
                sweep_id=sweep_id,
                probe_id=f"allreduce-{size_label(placement)}",
                placement=placement,
                nbytes=int(config.probe_mb * 1e6),
                iterations=config.probe_iterations,
                device=config.device,
                threads_per_rank=threads_per_rank(cores_per_host, most_slots(placement)),
            )
        )
    return probes

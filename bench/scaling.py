"""`python -m bench.scaling`: sweep GPU counts x launchers, store every run, write the report.

Order of work: validate everything (nothing launches if any request is impossible), probe
allreduce bandwidth once per GPU count, then launch each run as its own process group. Each
row is stored the moment its run ends; Ctrl-C (or SIGTERM) stops the current run, records it
as interrupted, writes the report from what finished, and `--resume DIR` continues later.
"""

from __future__ import annotations

import dataclasses
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from tqdm import tqdm

from bench import collect, launch, models, report
from bench.config import (
    BenchConfig,
    ConfigError,
    Environment,
    explicit_options,
    horovod_problem,
    parse_request,
    resolve,
    validate,
)
from bench.hosts import ClusterConfig
from bench.plan import HostSlots, ProbeSpec, RunSpec, local_placement, plan_probes, plan_sweep
from bench.remote import RemoteError, SshCluster
from bench.results import ResultStore
from bench.schema import Status
from bench.slurm import SlurmCluster
from bench.sysinfo import collect_system_info, detect_environment


@dataclass
class Sweep:
    config: BenchConfig
    store: ResultStore
    meta: dict[str, Any]
    runs: list[RunSpec]
    probes: list[ProbeSpec]
    unavailable: dict[str, str]  # launcher -> why it cannot run here
    # Multi-node sweeps: the executor that runs each launch on the nodes (it is also the
    # bench.launch.Cluster that completes the commands); None runs everything on this machine.
    cluster: SshCluster | SlurmCluster | None = None


def unavailable_launchers(config: BenchConfig, env: Environment) -> dict[str, str]:
    """Launchers in the sweep that cannot run here (only possible when not asked for by name:
    validation rejects an explicit --launchers horovod that cannot run)."""
    problems = {}
    if "horovod" in config.launchers:
        problem = horovod_problem(env, config.device)
        if problem:
            problems["horovod"] = problem
    return problems


def hosts_for(config: BenchConfig) -> tuple[HostSlots, ...]:
    """The hosts runs are placed on: this machine, with as many slots as the largest run."""
    return local_placement(max(config.gpu_counts))


def connect(cluster: ClusterConfig | None) -> SshCluster | None:
    """For --hosts: every node reachable over ssh and surveyed, before anything is planned."""
    if cluster is None or cluster.slurm:
        return None
    nodes = SshCluster(cluster)
    try:
        nodes.survey()
    except RemoteError as exc:
        raise ConfigError("  - " + str(exc).replace("\n", "\n    ")) from None
    return nodes


def prepare(argv: Sequence[str], env: Environment) -> Sweep:
    """Parse, validate and plan; create (or reopen, for --resume) the results directory."""
    request = parse_request(argv)
    if request.resume is not None:
        others = [o for o in explicit_options(argv) if o not in ("--resume", "--no-progress")]
        if others:
            raise ConfigError(
                f"  - --resume reuses the saved configuration; drop {', '.join(others)}"
            )
        store = ResultStore(request.resume)
        if not store.sweep_json.exists():
            raise ConfigError(f"  - --resume: {store.sweep_json} does not exist")
        meta = store.read_meta()
        meta.setdefault("resumed_at", []).append(collect.now_iso())
        config = BenchConfig.from_dict(meta["config"])
    nodes = connect(config.cluster if request.resume is not None else request.cluster)
    if nodes is not None:
        env = nodes.environment(env)  # what the nodes have decides, not this machine
    if request.resume is None:
        config = resolve(request, env)
        base = f"{datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}"
        sweep_id, suffix = base, 1
        while (Path(config.out_root) / sweep_id).exists():  # two sweeps in one second
            suffix += 1
            sweep_id = f"{base}-{suffix}"
        store = ResultStore(Path(config.out_root) / sweep_id)
        meta = {"sweep_id": sweep_id, "config": config.to_dict()}
    validate(config, env, models.available_models())
    unavailable = unavailable_launchers(config, env)
    cluster: SshCluster | SlurmCluster | None = nodes
    if nodes is not None:
        try:
            nodes.check([x for x in config.launchers if x not in unavailable], config.device)
        except RemoteError as exc:
            raise ConfigError("  - " + str(exc).replace("\n", "\n    ")) from None
    elif config.cluster is not None:
        cluster = SlurmCluster(config.cluster, config.device)
    hosts = hosts_for(config)
    runs = plan_sweep(config, meta["sweep_id"], hosts, env.cores)
    probes = plan_probes(config, meta["sweep_id"], hosts, env.cores)
    meta["system"] = collect_system_info(env)
    if nodes is not None:
        meta["system"]["nodes"] = [dataclasses.asdict(i) for i in nodes.infos.values()]
    meta["planned_runs"] = [s.run_id for s in runs]
    return Sweep(config, store, meta, runs, probes, unavailable, cluster)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def execute_sweep(
    sweep: Sweep, progress: bool = True, executor: launch.Executor | None = None
) -> str:
    """Run every pending probe and run; returns the final state ("complete" or "interrupted").

    executor defaults to the sweep's cluster (multi-node) or this machine (launch.run_local).
    """
    store, meta, config, cluster = sweep.store, sweep.meta, sweep.config, sweep.cluster
    executor = executor or cluster or launch.run_local
    resumed = store.sweep_json.exists()
    if resumed:
        store.drop_retried()
    else:
        store.create(meta)
    done_runs, done_probes = store.finished_run_ids(), store.finished_probe_ids()
    runs = [s for s in sweep.runs if s.run_id not in done_runs]
    probes = [p for p in sweep.probes if p.probe_id not in done_probes]
    launched = [s for s in runs if s.launcher not in sweep.unavailable]
    started = time.monotonic()
    meta.setdefault("started_at", collect.now_iso())
    previous_elapsed = float(meta.get("elapsed_s") or 0.0)
    print(
        f"bench: {'resuming' if resumed else 'sweep'} {store.directory}: launching "
        f"{len(launched)} run(s) and {len(probes)} probe(s); {len(sweep.runs) - len(runs)} "
        "run(s) already done; "
        f"device {config.device}, GPU counts {list(config.gpu_counts)}, "
        f"launchers {list(config.launchers)}",
        file=sys.stderr,
    )
    for launcher, reason in sweep.unavailable.items():
        print(
            f"bench: {launcher} unavailable, its runs are recorded as such: {reason}",
            file=sys.stderr,
        )

    def save(state: str) -> None:
        meta["state"] = state
        meta["elapsed_s"] = previous_elapsed + time.monotonic() - started
        store.write_meta(meta)

    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    bar = tqdm(total=len(launched) + len(probes), disable=not progress, unit="launch",
               desc="sweep", dynamic_ncols=True)  # fmt: skip
    current: RunSpec | ProbeSpec | None = None
    current_start = ""
    state = "interrupted"
    try:
        save("running")
        for spec in runs:
            if spec.launcher in sweep.unavailable:
                reason = sweep.unavailable[spec.launcher]
                store.runs.append(
                    collect.not_measured_row(spec, Status.UNAVAILABLE, reason, collect.now_iso())
                )
        for probe in probes:
            current, current_start = probe, collect.now_iso()
            bar.set_postfix_str(probe.probe_id)
            result = executor(
                launch.commands_for_probe(probe, cluster=cluster), config.timeout_s,
                store.logs / f"{probe.probe_id}.log",
            )  # fmt: skip
            store.probes.append(collect.probe_row(probe, result, current_start))
            save("running")
            bar.update()
        for spec in launched:
            current, current_start = spec, collect.now_iso()
            bar.set_postfix_str(spec.run_id)
            result = executor(
                launch.commands_for_run(spec, cluster=cluster), config.timeout_s,
                store.logs / f"{spec.run_id}.log",
            )  # fmt: skip
            row = collect.run_row(spec, result, current_start)
            store.runs.append(row)
            save("running")
            bar.update()
            outcome = f"{row.throughput:.1f} img/s" if row.throughput is not None else row.status
            bar.write(f"bench: {spec.run_id}: {outcome}", file=sys.stderr)
        current = None
        state = "complete"
    except KeyboardInterrupt:
        if isinstance(current, RunSpec):
            store.runs.append(
                collect.not_measured_row(
                    current, Status.INTERRUPTED, "sweep interrupted (Ctrl-C/SIGTERM)", current_start
                )
            )
        print("\nbench: interrupted; finished runs are kept. Continue with "
              f"--resume {store.directory}", file=sys.stderr)  # fmt: skip
    finally:
        bar.close()
        signal.signal(signal.SIGTERM, previous_handler)
        save(state)
        path = report.write_report(store.directory)
        print(f"bench: report {path}", file=sys.stderr)
    return state


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        request = parse_request(args)
        # importing horovod.torch to check it costs seconds: only when the sweep may use it
        # here (a --hosts sweep asks the nodes instead; Slurm nodes run this environment)
        horovod = request.resume is not None or "horovod" in (request.launchers or ("horovod",))
        horovod = horovod and (request.cluster is None or request.cluster.slurm)
        sweep = prepare(args, detect_environment(check_horovod=horovod))
    except ConfigError as exc:
        print(f"bench: cannot run this sweep:\n{exc}", file=sys.stderr)
        return 2
    state = execute_sweep(sweep, progress=request.progress)
    if state == "interrupted":
        return 130
    points = report.summarise(sweep.store.runs.rows(), sweep.store.probes.rows())
    print("\n".join(report.scaling_table(points)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The stages of a sweep, in order: `prepare` (resume or start fresh, connect to the nodes,
admit, plan), then `execute_sweep` (probe allreduce bandwidth once per GPU count, launch each
run as its own process group, write the report).

Each row is stored the moment its run ends; Ctrl-C (or SIGTERM) stops the current run, records
it as interrupted, writes the report from what finished, and `--resume DIR` continues later.
bench.scaling (the command line) imports this module only once the request has been checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from tqdm import tqdm

from bench import admission, nccl_tests, report, rows
from bench.config import BenchConfig, ConfigError, Request
from bench.hosts import ClusterConfig
from bench.launchers import ExecResult, Launcher, RemoteError
from bench.launchers.cluster import ClusterLauncher
from bench.launchers.docker import DockerWrapper
from bench.launchers.local import LocalLauncher
from bench.machine import Environment, collect_system_info
from bench.machine_defaults import chosen_defaults, resolve
from bench.paths import SweepPaths
from bench.plan import local_placement, plan_probes, plan_sweep, why_not_runnable
from bench.report import per_gpu
from bench.results import ResultStore
from bench.resume import Saved
from bench.schema import ProbeRow, Status
from bench.shared import models
from bench.spec import ProbeSpec, RunSpec
from bench.sweep_lock import acquire


@dataclass
class Sweep(Saved):
    """One sweep as its stages fill it in: what a saved sweep holds, then its plan."""

    runs: list[RunSpec] = field(default_factory=list)
    probes: list[ProbeSpec] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # launcher -> why it cannot run
    # What wraps each launch (the checked --container images; none for a host-only sweep).
    wrapper: DockerWrapper = field(default_factory=DockerWrapper)
    # What runs each launch: this machine, or the nodes (--hosts over ssh, --slurm srun steps).
    launcher: Launcher = field(default_factory=LocalLauncher)


def unavailable_reason(sweep: Sweep, spec: RunSpec) -> str:
    """Why a run is recorded without launching it ("" when it runs): its launcher cannot run
    where the run runs (the host or its image), or not in this configuration."""
    return sweep.wrapper.unavailable(spec, sweep.unavailable) or why_not_runnable(spec)


def connect(cluster: ClusterConfig | None) -> ClusterLauncher | None:
    """For --hosts or --slurm: every node reachable and surveyed, before anything is planned
    (its values, and Slurm's tools, were admitted before)."""
    if cluster is None:
        return None
    try:
        nodes = ClusterLauncher(cluster)
        nodes.survey()
    except RemoteError as exc:
        raise ConfigError("  - " + str(exc).replace("\n", "\n    ")) from None
    return nodes


def fresh_sweep(request: Request, env: Environment, config: BenchConfig) -> Sweep:
    """A new sweep under --out, named by time and host, once it is admitted. mkdir either creates
    its directory or fails, so two sweeps started in the same second get two (the second named
    with -2)."""
    base = f"{datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}"
    for suffix in itertools.count(1):
        sweep_id = base if suffix == 1 else f"{base}-{suffix}"
        with contextlib.suppress(FileExistsError):
            (Path(config.out_root) / sweep_id).mkdir(parents=True)
            break
    meta = {
        "sweep_id": sweep_id,
        "config": config.to_dict(),
        "defaults_chosen": chosen_defaults(request, env),  # why, for the report
    }
    return Sweep(config, ResultStore(Path(config.out_root) / sweep_id), meta)


def choose_launcher(sweep: Sweep, nodes: ClusterLauncher | None) -> Launcher:
    """Where the launches run (the nodes were admitted)."""
    if nodes is not None:
        nodes.wrapper = sweep.wrapper
        return nodes
    return LocalLauncher(wrapper=sweep.wrapper)


def plan_runs_and_probes(sweep: Sweep, env: Environment) -> None:
    """The runs and probes, in order, and the system facts saved with them."""
    config, meta = sweep.config, sweep.meta
    hosts = local_placement(max(config.gpu_counts))  # this machine, slots for the largest run
    sweep.runs = sweep.wrapper.pin(plan_sweep(config, meta["sweep_id"], hosts, env.cores))
    sweep.probes = plan_probes(config, meta["sweep_id"], hosts, env.cores)
    meta["system"] = collect_system_info(env)
    if isinstance(sweep.launcher, ClusterLauncher):
        meta["system"]["nodes"] = [dataclasses.asdict(i) for i in sweep.launcher.infos.values()]
    sweep.wrapper.record(meta["system"])
    meta["planned_runs"] = [s.run_id for s in sweep.runs]


def prepare(request: Request, env: Environment, saved: Saved | None = None) -> Sweep:
    """Resume or start fresh, connect to the nodes, admit and plan. Nothing runs yet.

    request: admitted by its values (bench.admission.request_problems); saved: the --resume sweep,
    opened by bench.resume before torch was imported. Every problem of the machine is in one
    ConfigError; the saved sweep's lock is released on any failure.
    """
    try:
        nodes = connect(saved.config.cluster if saved else request.cluster)
        if nodes is not None:
            env = nodes.environment(env)  # what the nodes have decides, not this machine
        config = saved.config if saved else resolve(request, env)
        admitted = admission.admit(config, env, models.available_models(), nodes)
        if saved is not None:
            sweep = Sweep(saved.config, saved.store, saved.meta, saved.lock)
        else:
            sweep = fresh_sweep(request, env, config)
        sweep.unavailable, sweep.wrapper = admitted.unavailable, admitted.wrapper
        sweep.launcher = choose_launcher(sweep, nodes)
        plan_runs_and_probes(sweep, env)
        return sweep
    except BaseException:
        if saved is not None and saved.lock is not None:
            saved.lock.release()
        raise


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def announce(sweep: Sweep, resumed: bool, launched: int, probes: int, done: int) -> None:
    config = sweep.config
    print(
        f"bench: {'resuming' if resumed else 'sweep'} {sweep.store.directory}: launching "
        f"{launched} run(s) and {probes} probe(s); {done} run(s) already done; "
        f"device {config.device}, GPU counts {list(config.gpu_counts)}, "
        f"launchers {list(config.launchers)}",
        file=sys.stderr,
    )
    for reason in sweep.meta.get("defaults_chosen", []) if not resumed else []:
        print(f"bench: default {reason}", file=sys.stderr)
    for launcher, reason in sweep.unavailable.items():
        print(
            f"bench: {launcher} unavailable, its runs are recorded as such: {reason}",
            file=sys.stderr,
        )
    for note in sweep.wrapper.notes():
        print(f"bench: {note}", file=sys.stderr)


class Progress:
    """The sweep's clock and progress bar; `save` writes sweep.jsonl with the state so far."""

    def __init__(self, sweep: Sweep, total: int, shown: bool) -> None:
        self.sweep = sweep
        self.started = time.monotonic()
        self.previous_elapsed = float(sweep.meta.get("elapsed_s") or 0.0)
        sweep.meta.setdefault("started_at", rows.now_iso())
        self.bar = tqdm(
            total=total, disable=not shown, unit="launch", desc="sweep", dynamic_ncols=True
        )

    def save(self, state: str) -> None:
        meta = self.sweep.meta
        meta["state"] = state
        meta["elapsed_s"] = self.previous_elapsed + time.monotonic() - self.started
        self.sweep.store.write_meta(meta)

    def done(self, label: str, outcome: str = "") -> None:
        self.save("running")
        self.bar.update()
        if outcome:
            self.bar.write(f"bench: {label}: {outcome}", file=sys.stderr)


def keep_earlier(paths: SweepPaths, name: str) -> None:
    """An earlier attempt's output (a run measured again on --resume) is never overwritten: it
    moves to <name>.<k>.log (and .nodes), k the first number free."""
    kept = [p for p in (paths.log(name), SweepPaths.nodes(paths.log(name))) if p.exists()]
    if kept:
        k = next(k for k in itertools.count(1) if not any(paths.logs.glob(f"{name}.{k}.*")))
        for path in kept:
            path.rename(paths.log(name, k).with_suffix(path.suffix))


def launch_one(sweep: Sweep, spec: RunSpec | ProbeSpec, launcher: Launcher) -> ExecResult:
    """One probe or run on the launcher, its output in logs/<id>.log (and a --profile trace
    beside it); an earlier attempt's log is kept (keep_earlier)."""
    paths = sweep.store.paths
    name = spec.probe_id if isinstance(spec, ProbeSpec) else spec.run_id
    keep_earlier(paths, name)
    if isinstance(spec, RunSpec) and spec.trace_path:
        trace = (paths.logs / spec.trace_path).resolve()
        spec = dataclasses.replace(spec, trace_path=str(trace))
    return launcher.run(spec, sweep.config.timeout_s, paths.log(name))


def beside_nccl_tests(
    row: ProbeRow, probe: ProbeSpec, config: BenchConfig, launcher: Launcher
) -> ProbeRow:
    """A GPU probe's row with nccl-tests' bus bandwidth at the same size and GPUs beside it."""
    if probe.device != "cuda" or config.nccl_tests == "off":
        return row
    if not isinstance(launcher, LocalLauncher) or len(probe.placement) > 1:
        note = "not run: across nodes nccl-tests needs an MPI build and launch"
        return dataclasses.replace(row, nccl_tests=note)
    binary = nccl_tests.find_binary(config.nccl_tests)
    if binary is None:
        note = "not installed (the nccl_tests role, or --nccl-tests PATH)"
        return dataclasses.replace(row, nccl_tests=note)
    result = nccl_tests.measure(binary, probe.nbytes, probe.world_size, probe.iterations)
    return dataclasses.replace(row, nccl_tests_busbw_gbps=result.busbw_gbps, nccl_tests=result.note)


def run_all(
    sweep: Sweep,
    runs: list[tuple[RunSpec, str]],
    probes: list[ProbeSpec],
    launcher: Launcher,
    progress: Progress,
) -> None:
    """Probes first, then runs, each row stored the moment it is known; `runs` pairs each run
    with why it is not launched ("" when it is). On an interrupt the run in progress is recorded
    as interrupted and the interrupt propagates."""
    store = sweep.store
    for spec, reason in runs:
        if reason:
            for row in rows.not_measured_rows(spec, Status.UNAVAILABLE, reason, rows.now_iso()):
                store.runs.append(row)
    for probe in probes:
        progress.bar.set_postfix_str(probe.probe_id)
        started_at = rows.now_iso()
        row = rows.probe_row(probe, launch_one(sweep, probe, launcher), started_at)
        store.probes.append(beside_nccl_tests(row, probe, sweep.config, launcher))
        progress.done(probe.probe_id)
    for spec in (spec for spec, reason in runs if not reason):
        progress.bar.set_postfix_str(spec.run_id)
        started_at = rows.now_iso()
        try:
            result = launch_one(sweep, spec, launcher)
        except KeyboardInterrupt:
            reason = "sweep interrupted (Ctrl-C/SIGTERM)"
            for row in rows.not_measured_rows(spec, Status.INTERRUPTED, reason, started_at):
                store.runs.append(row)
            raise
        outcomes = []
        for row in rows.run_rows(spec, result, started_at, sweep.config.timeout_s):
            store.runs.append(row)
            measured = row.throughput is not None
            outcomes.append(f"{row.throughput:.1f} img/s" if measured else row.status)
        profile = rows.profile_of(spec, result)
        if profile is not None:
            store.write_profile(spec.run_id, profile)
        progress.done(spec.run_id, ", ".join(outcomes))


FULL = (errno.ENOSPC, errno.EDQUOT)  # the write errors a sweep survives: its files are kept


def execute_sweep(sweep: Sweep, progress: bool = True, launcher: Launcher | None = None) -> str:
    """Run every pending probe and run; returns the final state: "complete", "interrupted", or
    "unsaved" when a file could not be written (a full disk; what was stored stays).

    launcher: instead of the sweep's own (tests).
    """
    resumed = sweep.lock is not None
    if not resumed:
        sweep.lock = acquire(sweep.store.directory)  # before sweep.jsonl: the directory is ours
    try:
        return _execute(sweep, launcher or sweep.launcher, resumed, progress)
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        print(
            f"bench: could not write {exc.filename or sweep.store.directory} "
            f"({exc.strerror or exc}). The runs stored before are kept in "
            f"{sweep.store.directory}: free space, then --resume {sweep.store.directory}",
            file=sys.stderr,
        )
        return "unsaved"
    finally:
        sweep.lock.release()


def _execute(sweep: Sweep, launcher: Launcher, resumed: bool, progress: bool) -> str:
    store = sweep.store
    if resumed:
        store.drop_retried()
    else:
        store.create(sweep.meta)
    done_runs, done_probes = store.runs.finished_ids(), store.probes.finished_ids()
    runs = [
        (s, unavailable_reason(sweep, s))
        for s in sweep.runs
        if any(r.run_id not in done_runs for r, _ in rows.row_specs(s))
    ]
    probes = [p for p in sweep.probes if p.probe_id not in done_probes]
    launched = sum(not reason for _, reason in runs)
    announce(sweep, resumed, launched, len(probes), len(sweep.runs) - len(runs))
    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    clock = Progress(sweep, launched + len(probes), progress)
    state = "interrupted"
    try:
        clock.save("running")
        run_all(sweep, runs, probes, launcher, clock)
        state = "complete"
    except KeyboardInterrupt:
        print(
            "\nbench: interrupted; finished runs are kept. Continue with "
            f"--resume {store.directory}",
            file=sys.stderr,
        )
    finally:
        clock.bar.close()
        signal.signal(signal.SIGTERM, previous_handler)
    clock.save(state)
    print(f"bench: report {report.write_report(store.directory)}", file=sys.stderr)
    return state


def all_runs_ok(sweep: Sweep) -> bool:
    """Whether every row of the sweep is a measured run (exit status 0 rather than 1)."""
    recorded = sweep.store.runs.rows()
    return bool(recorded) and all(r.status == Status.OK.value for r in recorded)


def print_table(sweep: Sweep) -> list[per_gpu.GpuVerdict]:
    """Prints the scaling table and the per-gpu check; returns the per-gpu check's fleet table
    (empty without per-gpu runs), slowest first."""
    recorded = sweep.store.runs.rows()
    print("\n".join(report.scaling_table(report.summarise(recorded, sweep.store.probes.rows()))))
    fleet = per_gpu.verdicts(recorded, sweep.config.slow_gpu_threshold)
    if fleet:
        print("\n" + "\n".join(per_gpu.per_gpu_section(fleet, sweep.config.slow_gpu_threshold)))
    return fleet

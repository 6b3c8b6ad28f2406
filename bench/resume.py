"""--resume DIR: the saved sweep opened before anything heavy (torch) is imported, so a resume
that cannot go on is refused at once.

In order: no other option beside --resume (the saved configuration is reused); the sweep's lock
(bench.sweep_lock: a second controller is refused with the first one's identity); the results
read back, every damaged or missing file rebuilt from what survives (bench.results); the saved
values admitted as a request's are (bench.admission.saved_problems); then what
an earlier controller of this sweep left running is stopped (bench.launchers.stop, by the sweep's
tag): on every node of the sweep first (--hosts', or under --slurm the nodes of the allocation
the resume runs in; a node that cannot be reached refuses the resume), then on this machine.
A --slurm sweep's processes in an allocation that has ended ended with it (Slurm kills a job's
steps when the job ends). Failures are ConfigError (exit status 2), each saying how to recover.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.admission import saved_problems
from bench.config import BenchConfig, ConfigError, Request
from bench.hosts import ClusterConfig
from bench.launchers import SWEEP_TAG_VAR, RemoteError
from bench.launchers.sites import last_line, on_all, run_on_host, site_for
from bench.launchers.stop import STOP, StopPolicy, stop_script, stop_tagged
from bench.options import explicit_options
from bench.results import ResultStore, StoreError
from bench.sweep_lock import LockHeld, SweepLock, acquire


@dataclass
class Saved:
    """A sweep's configuration, store and metadata, and its lock once its directory is ours: a
    sweep to continue holds it from the start (a fresh one from bench.stages.execute_sweep)."""

    config: BenchConfig
    store: ResultStore
    meta: dict[str, Any]
    lock: SweepLock | None = None


def say(directory: Path, line: str) -> None:
    print(f"bench: {directory}: {line}", file=sys.stderr)


def _refused(problem: str) -> ConfigError:
    return ConfigError(f"  - --resume: {problem}")


def read_saved(store: ResultStore) -> tuple[BenchConfig, dict[str, Any]]:
    """The saved configuration and metadata; ConfigError when they cannot be used."""
    try:
        for line in store.load():
            say(store.directory, line)
    except StoreError as exc:
        raise _refused(str(exc)) from None
    except OSError as exc:
        raise _refused(
            f"cannot rewrite {exc.filename or store.directory}: {exc.strerror}"
        ) from None
    meta = store.read_meta()
    try:
        config = BenchConfig.from_dict(meta["config"])
    except (TypeError, ValueError, KeyError) as exc:
        raise _refused(f"{store.paths.store}: its configuration does not load ({exc})") from None
    problems = saved_problems(config)  # the values tier, on the saved values
    if problems:
        raise _refused(
            f"{store.paths.store}: its configuration is refused:\n    - "
            + "\n    - ".join(problems)
        )
    return config, meta


def stop_leftovers(directory: Path, sweep_id: str, policy: StopPolicy = STOP) -> None:
    """Stop every local process of this sweep still running (started by an earlier
    controller that was killed), saying which."""
    pids = stop_tagged(SWEEP_TAG_VAR, sweep_id, policy) if sweep_id else []
    if pids:
        listed = " ".join(map(str, pids))
        say(directory, f"stopped {len(pids)} process(es) an earlier controller left: {listed}")


def stop_on_hosts(
    directory: Path, cluster: ClusterConfig | None, sweep_id: str, policy: StopPolicy = STOP
) -> None:
    """--hosts or --slurm: stop every process of this sweep still running on any of its nodes
    (the node stop script, by the sweep's tag, through the sweep's site), all nodes at once,
    saying which stopped where. A node that cannot be reached (or whose script
    fails) refuses the resume: ranks of the sweep may still hold its GPUs and would skew every
    figure."""
    if cluster is None or not sweep_id:
        return
    try:
        site, hosts = site_for(cluster)
    except RemoteError as exc:
        raise _refused(str(exc)) from None
    script = stop_script(SWEEP_TAG_VAR, sweep_id, policy, describe=True)
    timeout_s = policy.grace_s + 90
    results = on_all(hosts, lambda h: run_on_host(h, script, site, timeout_s))
    failed = {h: r for h, r in results.items() if r.returncode != 0}
    if failed:
        lines = [
            f"{h}: rc={r.returncode}: {last_line(r.stderr or r.stdout)}" for h, r in failed.items()
        ]
        raise _refused(
            f"cannot make sure that no rank of this sweep is left on {len(failed)} of "
            f"{len(hosts)} host(s) (its ranks may still hold their GPUs):\n      "
            + "\n      ".join(lines)
            + f"\n    Bring the host back, or stop its processes with {SWEEP_TAG_VAR}="
            f"{sweep_id} in their environment, then resume again."
        )
    for host, result in results.items():
        if result.stdout.strip():
            say(directory, f"{host}: an earlier controller left processes of this sweep there:")
        for line in result.stdout.strip().splitlines():
            say(directory, f"{host}:   {line}")


def open_saved(request: Request, argv: Sequence[str], policy: StopPolicy = STOP) -> Saved | None:
    """--resume: the saved sweep, locked, read back and cleared of leftovers; None for a
    fresh sweep."""
    if request.resume is None:
        return None
    others = [o for o in explicit_options(argv) if o not in ("--resume", "--no-progress")]
    if others:
        raise _refused(f"it reuses the saved configuration; drop {', '.join(others)}")
    directory = request.resume
    if not directory.is_dir():
        raise _refused(f"{directory} is not a directory")
    notes: list[str] = []
    try:
        lock = acquire(directory, notes)
    except LockHeld as exc:
        raise _refused(str(exc)) from None
    except OSError as exc:
        raise _refused(f"cannot take the lock in {directory}: {exc.strerror}") from None
    for line in notes:
        say(directory, line)
    try:
        store = ResultStore(directory)
        config, meta = read_saved(store)
        sweep_id = str(meta.get("sweep_id", ""))
        # the hosts first: on test hosts sharing this kernel the local stop would see theirs too
        stop_on_hosts(directory, config.cluster, sweep_id, policy)
        stop_leftovers(directory, sweep_id, policy)
    except BaseException:
        lock.release()
        raise
    meta.setdefault("resumed_at", []).append(datetime.now(UTC).isoformat(timespec="seconds"))
    return Saved(config, store, meta, lock)

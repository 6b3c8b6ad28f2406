"""Running one launch's commands on their nodes at once, with a deadline, and stopping every
process of the launch on every node when one node fails or the launch overruns; reading a
failed launch's output for the line that says why (`failure_reason`, for the results table)."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.launchers import RUN_TAG_VAR
from bench.launchers.argv import NodeCommand
from bench.launchers.sites import Site, last_line, on_all, run_on_host, shell_command
from bench.launchers.stop import STOP, StopPolicy, stop_script, stop_tree
from bench.paths import SweepPaths


def kill_run(
    hosts: Sequence[str],
    tag: str,
    site: Site,
    policy: StopPolicy = STOP,
    first_lines: Mapping[str, str] | None = None,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Stop every process of the launch tagged `tag` on each host, after what a wrapper started
    around it there (`first_lines`: host -> sh), a host that is down reported, not fatal."""
    scripts = {
        h: stop_script(RUN_TAG_VAR, tag, policy, (first_lines or {}).get(h, "")) for h in hosts
    }
    return on_all(hosts, lambda h: run_on_host(h, scripts[h], site, policy.grace_s + 60))


@dataclass
class NodeOutcome:
    """How one node's launcher ended."""

    host: str
    returncode: int | None
    log_path: Path
    timed_out: bool = False
    stopped: bool = False  # stopped by us because another node failed or the run overran

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.stopped

    def output(self, limit: int = 200_000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace")


@dataclass
class MultiNodeResult:
    tag: str
    outcomes: list[NodeOutcome]
    wall_s: float
    cleanup: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def timed_out(self) -> bool:
        return any(o.timed_out for o in self.outcomes)

    def failure_summary(self) -> str:
        """One line per node that did not finish cleanly: the first node to fail comes first."""
        lines = []
        for o in self.outcomes:
            if o.ok:
                continue
            if o.timed_out:
                what = "timed out"
            elif o.stopped:
                what = "stopped after another node failed"
            else:
                what = f"exited with rc={o.returncode}"
            lines.append(f"{o.host}: {what}: {failure_reason(o.output(50_000))}")
        return "\n".join(lines)


def _start(
    commands: Sequence[NodeCommand],
    site: Site,
    tag: str,
    log_dir: Path,
    workdir: str | None,
    remote_timeout_s: float,
    policy: StopPolicy,
    started: list[tuple[subprocess.Popen, NodeOutcome]],
) -> None:
    """Start each node's command, each added to `started` once it runs: when a start fails
    part-way, the caller still holds the nodes started before it, to stop them."""
    for index, command in enumerate(commands):
        log_path = SweepPaths.node_log(log_dir, index, command.host)
        with log_path.open("wb") as log:
            env = {RUN_TAG_VAR: tag, **command.env}
            line = shell_command(command.argv, env, workdir, remote_timeout_s, policy)
            proc = subprocess.Popen(
                site.argv(command.host, line),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        started.append((proc, NodeOutcome(command.host, None, log_path)))


def _wait(
    procs: Sequence[tuple[subprocess.Popen, NodeOutcome]],
    deadline: float,
    failure_grace_s: float,
    poll_s: float,
) -> None:
    """Until every node's launcher ended, the deadline passed (timed out), or one node failed
    failure_grace_s ago (the rest are marked stopped)."""
    failed_at: float | None = None
    while True:
        now = time.monotonic()
        for proc, outcome in procs:
            if outcome.returncode is None and proc.poll() is not None:
                outcome.returncode = proc.returncode
                if proc.returncode != 0 and failed_at is None:
                    failed_at = now
        running = [o for _, o in procs if o.returncode is None]
        if not running:
            return
        if now >= deadline:
            for outcome in running:
                outcome.timed_out = True
            return
        if failed_at is not None and now >= failed_at + failure_grace_s:
            for outcome in running:
                outcome.stopped = True
            return
        time.sleep(poll_s)


def run_on_nodes(
    commands: Sequence[NodeCommand],
    site: Site,
    *,
    tag: str,
    timeout_s: float,
    log_dir: Path,
    hosts: Sequence[str] = (),
    workdir: str | None = None,
    failure_grace_s: float = 20,
    policy: StopPolicy = STOP,
    poll_s: float = 0.2,
) -> MultiNodeResult:
    """Start every node's command at once (in workdir, tagged with `tag`) and wait for all.

    When one node fails (its launcher exits non-zero, or its connection (ssh, srun) drops
    because the node died), the others get failure_grace_s to notice and exit by themselves;
    then they, and everything of the run on every node of `hosts` (the launch's placement:
    horovodrun reaches nodes no command names), are stopped with `policy`. After every launch,
    failed or not, what is left of the run on those nodes is stopped the same way. The whole run
    never exceeds timeout_s plus the failure grace and the policy's. Node i's output goes to
    log_dir/node<i>-<host>.log.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The node-side timeout is a backstop should this process die; ours fires first.
    remote_timeout = timeout_s + failure_grace_s + policy.grace_s + 30
    procs: list[tuple[subprocess.Popen, NodeOutcome]] = []
    cleanup: dict[str, str] = {}
    try:
        _start(commands, site, tag, log_dir, workdir, remote_timeout, policy, procs)
        _wait(procs, started + timeout_s, failure_grace_s, poll_s)
    finally:
        leftovers = [(p, o) for p, o in procs if p.poll() is None]
        if procs:
            # Clean every node of the placement, not only those still attached: a node whose
            # ssh dropped may still run ranks, and even after a clean exit a rank that
            # horovodrun started over ssh can outlive it for a moment. Only this run's tagged
            # processes are touched; after a clean run there is usually nothing to stop.
            every = list(dict.fromkeys([c.host for c in commands] + list(hosts)))
            first = {c.host: c.enclosure.stop_lines(policy) for c in commands if c.enclosure}
            for host, result in kill_run(every, tag, site, policy, first).items():
                if result.returncode != 0:
                    cleanup[host] = f"cleanup failed: {last_line(result.stderr or result.stdout)}"
                elif result.stdout.strip():
                    cleanup[host] = result.stdout.strip()
        for proc, outcome in leftovers:
            stop_tree(proc, policy)
            if outcome.returncode is None:
                outcome.returncode = proc.returncode
    return MultiNodeResult(tag, [o for _, o in procs], time.monotonic() - started, cleanup)


_SEPARATOR = re.compile(r"^[\s=\-*]*$")
_ERROR_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Exit)\b:?\s.*")
_HOROVOD_FIELD = re.compile(r"^(Process name|Exit code):\s*(.+?)\s*$")
_TORCHRUN_FIELD = re.compile(r"^\s*(host|rank|exitcode|traceback)\s*:\s*(.+?)\s*$")


def failure_reason(text: str, limit: int = 400) -> str:
    """The most telling line of a failed launcher's output, for the results table.

    torchrun ends with a root-cause table (host, rank, exitcode, signal) after the traceback,
    horovodrun with the first failed process's name and exit code; ranks print
    "SomethingError: ..." (prefixed "[rank0]:" by torchrun, "[1]<stderr>:" by horovodrun).
    Prefer the last exception line, add the launcher's root cause, else the last line.
    """
    lines = [line.strip() for line in text.splitlines() if not _SEPARATOR.match(line)]
    error = ""
    for line in lines:
        match = _ERROR_LINE.search(line)
        if match and "ChildFailedError" not in line:
            error = match.group(0)
    fields: dict[str, str] = {}
    for line in lines:
        match = _TORCHRUN_FIELD.match(line)
        if match:
            fields[match.group(1)] = match.group(2)
    cause = ""
    if "exitcode" in fields:
        where = " ".join(f"{k} {fields[k]}" for k in ("rank", "host") if k in fields)
        cause = f"{where}: exitcode {fields['exitcode']}".strip(": ")
    horovod = dict(m.groups() for m in map(_HOROVOD_FIELD.match, lines) if m)
    if horovod:
        # horovodrun names the first rank to fail on the lines after its RuntimeError.
        cause = ", ".join(f"{k.lower()} {v}" for k, v in horovod.items())
    reason = "; ".join(part for part in (error, cause) if part) or (lines[-1] if lines else "")
    reason = reason or "(no output)"
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."

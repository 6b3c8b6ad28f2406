"""The one way a launch is stopped, on every backend: SIGTERM to every process of the launch,
a grace period for them to exit, then SIGKILL for whatever is left.

- `stop_tree`: a process started here and all its descendants (torchrun starts its ranks in
  sessions of their own, so signalling its process group alone would orphan them).
- `stop_script`: the same steps as a sh script for a node reached through a site (ssh, an
  srun step), finding the launch's processes by the tag in their environment.
- `node_timeout_argv`: coreutils timeout with the same signals, the node-side backstop should
  the controlling bench (or its ssh connection) go away.
- what a wrapper started around a command (bench.launchers.argv.Enclosure) is stopped by the
  wrapper first, with the same policy.
- `stop_tagged`: the same steps for every local process whose environment has a tag, such as
  what an earlier controller of a resumed sweep left running.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class StopPolicy:
    grace_s: float = 10.0
    first: signal.Signals = signal.SIGTERM
    last: signal.Signals = signal.SIGKILL

    def signal_names(self) -> tuple[str, str]:
        """("TERM", "KILL"): the names kill and timeout take."""
        return self.first.name.removeprefix("SIG"), self.last.name.removeprefix("SIG")


STOP = StopPolicy()


def _signal_all(procs: Sequence[psutil.Process], sig: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _wait_gone(procs: Sequence[psutil.Process], seconds: float = 0) -> list[psutil.Process]:
    """Wait up to `seconds` for the processes to end; returns those still running (a zombie has
    exited, only its parent has yet to reap it)."""
    deadline = time.monotonic() + seconds
    while True:
        running = []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    running.append(proc)
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.05)


def stop_tree(proc: subprocess.Popen, policy: StopPolicy = STOP) -> None:
    """Stop a process started here and all its descendants; returns once it is reaped (by
    Popen, so that its returncode stays the signal's)."""
    if proc.poll() is not None:
        return
    tree = _descendants(proc.pid)
    proc.send_signal(policy.first)
    _signal_all(tree, policy.first)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=policy.grace_s)
    # what is left of the tree, and what its processes started during the grace period
    survivors = _wait_gone(list(dict.fromkeys([*tree, *_descendants(proc.pid)])))
    if proc.poll() is None:
        proc.send_signal(policy.last)
    _signal_all(survivors, policy.last)
    proc.wait()
    # a descendant reparented to init may outlive its parent for a moment: wait for it
    _wait_gone(survivors, policy.grace_s)


def stop_tagged(tag_var: str, tag: str, policy: StopPolicy = STOP) -> list[int]:
    """Stop every local process (but this one) whose environment has tag_var=tag exactly: the
    first signal, up to the grace period, the last signal. Returns the pids it found."""
    procs = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and proc.environ().get(tag_var) == tag:
                procs.append(proc)
    _signal_all(procs, policy.first)
    _signal_all(_wait_gone(procs, policy.grace_s), policy.last)
    return [proc.pid for proc in procs]


def stop_script(
    tag_var: str, tag: str, policy: StopPolicy = STOP, first_lines: str = "", describe: bool = False
) -> str:
    """sh: stop every process on this node whose environment has tag_var=tag.

    Only processes in the same network namespace as the script count: on real nodes that is all
    of them; on test hosts sharing one kernel it keeps one host's cleanup off the others.
    first_lines: sh run first (what a wrapper started around the launch, stopped by it).
    describe: first print "stopping PID COMMAND LINE" for each process found.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
        raise ValueError(f"unsafe run id {tag!r}")
    first, last = policy.signal_names()
    grace = max(1, math.ceil(policy.grace_s))
    listing = (
        r"""for p in $pids; do echo "stopping $p $(tr '\0' ' ' 2>/dev/null </proc/$p/cmdline"""
        r""" | cut -c1-160)"; done"""
        "\n"
        if describe
        else ""
    )
    return f"""
{first_lines}tag={tag_var}={tag}
ns=$(readlink /proc/$$/ns/net)
find_run() {{
  for d in /proc/[0-9]*; do
    [ "${{d#/proc/}}" = "$$" ] && continue
    [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$ns" ] || continue
    grep -qzxF "$tag" "$d/environ" 2>/dev/null && echo "${{d#/proc/}}"
  done
}}
pids=$(find_run)
[ -z "$pids" ] && exit 0
{listing}kill -{first} $pids 2>/dev/null
end=$(($(date +%s) + {grace}))
while [ "$(date +%s)" -lt "$end" ]; do
  sleep 0.2
  pids=$(find_run)
  [ -z "$pids" ] && exit 0
done
kill -{last} $pids 2>/dev/null
echo "killed after {grace}s grace: $pids"
"""


def node_timeout_argv(timeout_s: float, policy: StopPolicy = STOP) -> list[str]:
    """coreutils timeout: the first signal after timeout_s, the last after the grace period."""
    first, _ = policy.signal_names()
    grace = max(1, round(policy.grace_s))
    return ["timeout", f"--signal={first}", f"--kill-after={grace}s", f"{max(1, int(timeout_s))}s"]

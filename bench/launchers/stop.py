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
from pathlib import Path


@dataclass(frozen=True)
class StopPolicy:
    grace_s: float = 10.0
    first: signal.Signals = signal.SIGTERM
    last: signal.Signals = signal.SIGKILL

    def signal_names(self) -> tuple[str, str]:
        """("TERM", "KILL"): the names kill and timeout take."""
        return self.first.name.removeprefix("SIG"), self.last.name.removeprefix("SIG")


STOP = StopPolicy()


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid`."""
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


def stop_tree(proc: subprocess.Popen, policy: StopPolicy = STOP) -> None:
    """Stop a process started here and all its descendants; returns once it is reaped."""
    if proc.poll() is not None:
        return
    tree = [proc.pid, *_children(proc.pid)]
    _signal_all(tree, policy.first)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=policy.grace_s)
    survivors = [pid for pid in tree if Path(f"/proc/{pid}").exists()]
    _signal_all([*survivors, *_children(proc.pid)], policy.last)
    proc.wait()
    # a descendant reparented to init may outlive its parent for a moment: wait for it
    deadline = time.monotonic() + policy.grace_s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in survivors):
        time.sleep(0.05)


def tagged_processes(tag_var: str, tag: str) -> list[int]:
    """Local processes (but this one) whose environment has tag_var=tag exactly."""
    entry = f"{tag_var}={tag}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if entry in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def stop_tagged(tag_var: str, tag: str, policy: StopPolicy = STOP) -> list[int]:
    """Stop every local process tagged tag_var=tag: the first signal, up to the grace period,
    the last signal. Returns the pids it found."""
    pids = tagged_processes(tag_var, tag)
    _signal_all(pids, policy.first)
    deadline = time.monotonic() + policy.grace_s
    while time.monotonic() < deadline and _alive(pids):
        time.sleep(0.05)
    _signal_all(_alive(pids), policy.last)
    return pids


def _alive(pids: Sequence[int]) -> list[int]:
    """The pids still running (a zombie has exited: its stat state is Z)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


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

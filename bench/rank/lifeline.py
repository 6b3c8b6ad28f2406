"""A process that dies with its parent: Linux's PR_SET_PDEATHSIG.

The controller starts torchrun/horovodrun with it (a preexec function); every rank sets it
first thing (on importing bench.rank, before torch loads, where the launch's environment has
DIE_WITH_PARENT_VAR=1), and so does every DataLoader worker. When the controller is killed,
even with SIGKILL, which no handler sees, the kernel kills the launcher, then each rank, then
each worker, in a chain: no process of the sweep keeps running (or holding GPU memory) after
it. The signal goes out when the parent *thread* that started the process exits: every launch
is started from the controller's main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
DIE_WITH_PARENT_VAR = "BENCH_DIE_WITH_PARENT"
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux only;
    elsewhere nothing). Safe in a preexec function: one system call, nothing allocated."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def arm_from_environment() -> None:
    """In a process the launchers started (DIE_WITH_PARENT_VAR=1): die with the parent."""
    if os.environ.get(DIE_WITH_PARENT_VAR) == "1":
        die_with_parent()

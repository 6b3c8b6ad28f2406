"""A process that dies with its parent: Linux's PR_SET_PDEATHSIG.

The controller starts torchrun/horovodrun with it (a preexec function); every rank sets it
first thing (on importing bench.rank, before torch loads, where the launch's environment has
DIE_WITH_PARENT_VAR=1), and so does every DataLoader worker. When the controller is killed,
even with SIGKILL, which no handler sees, the kernel kills the launcher, then each rank, then
each worker, in a chain: no process of the sweep keeps running (or holding GPU memory) after
it. The signal goes out when the parent *thread* that started the process exits: every launch
is started from the controller's main thread. A rank ends through `exit_rank`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import NoReturn

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


def exit_rank(code: int) -> NoReturn:
    """End a rank process after its last collective, without finalizing the interpreter.

    Gloo's worker threads can still hold the last reference to a finished collective's tensors
    when the main thread returns. Releasing them needs the GIL, and a thread that asks for it
    while the interpreter finalizes aborts the process ("terminate called without an active
    exception", SIGABRT) after a run that succeeded. destroy_process_group() does not join
    those threads once DDP has wrapped a model: torch 2.13 keeps references to the group. On
    the 2-core CPU VM, 2-rank runs of tests/integration/engine_check.py ended that way in 2 of
    40 and 1 of 21 launches. A rank has nothing left to do after shutdown(): it flushes its
    output and leaves. A TensorFlow rank (bench.rank.keras_worker) leaves the same way: its
    collective and gRPC threads may still be winding down.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

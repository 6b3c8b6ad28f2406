"""One controller per sweep directory: an exclusive flock(2) on controller.lock.

The controller holds the lock for as long as it runs the sweep, and the kernel releases it when
the process ends, however it ends (flock(2): the lock goes with the last descriptor of the open
file), so a lock is never stale. The file also names its holder (pid, host, start time, command)
for the message a second controller gets. Over NFS, Linux emulates flock with fcntl byte-range
locks, which the server sees (flock(2), NOTES, since Linux 2.6.12; man-pages 6.18, checked
2026-11-27), unless the share is mounted with local_lock: a lock file that names another host is
therefore refused even when no lock is held here, with how to release it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path

from bench.paths import SweepPaths


class LockHeld(Exception):
    """Another controller holds the sweep; the message names it."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started_at: str  # ISO time the controller took the lock
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started_at} ({self.command})"


def this_controller() -> Holder:
    return Holder(
        pid=os.getpid(),
        host=socket.gethostname(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=" ".join(["python -m bench.scaling", *sys.argv[1:]])[:300],
    )


def read_holder(path: Path) -> Holder | None:
    """Who the lock file names; None if it is gone, empty or unreadable (lock files of earlier
    versions carry more keys: only this one's are read)."""
    try:
        named = json.loads(path.read_text())
        return Holder(**{f.name: named[f.name] for f in fields(Holder)})
    except (OSError, ValueError, TypeError, KeyError):
        return None


@dataclass
class SweepLock:
    path: Path
    holder: Holder
    fd: int

    def release(self) -> None:
        """Remove the lock file while still holding it, then let the lock go."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)


def refusal(path: Path, holder: Holder | None) -> str:
    if holder is None:
        return (
            f"{path.parent} is being run by another controller ({path} is locked). Wait for it to "
            "end, or stop it, then --resume again"
        )
    if holder.host != socket.gethostname():
        return (
            f"{path} names a controller on another host: {holder.describe()}, whose lock cannot be "
            f"seen from here. If it no longer runs this sweep, remove {path} and --resume again"
        )
    return (
        f"{path.parent} is being run by another controller: {holder.describe()}. "
        "Wait for it to end, or stop it, then --resume again"
    )


def _locked(path: Path) -> int | None:
    """A descriptor of PATH holding its exclusive flock, or None when another process holds it.
    The file is locked as it is named when the call returns: one unlinked by its holder's release
    between our open and our lock is opened again."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def acquire(directory: Path, notes: list[str] | None = None) -> SweepLock:
    """Take the sweep's lock for this controller; LockHeld when a live controller holds it, or
    the file names one on another host. A file left by a controller that ended without releasing
    it is taken, said in `notes`."""
    path, me = SweepPaths(directory).lock, this_controller()
    fd = _locked(path)
    if fd is None:
        raise LockHeld(refusal(path, read_holder(path)))
    left = read_holder(path)
    if left is not None and left.host != me.host:
        os.close(fd)
        raise LockHeld(refusal(path, left))
    if left is not None and notes is not None:
        notes.append(f"took over the lock of {left.describe()}: no longer running")
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(asdict(me)).encode())
    os.fsync(fd)
    return SweepLock(path, me, fd)

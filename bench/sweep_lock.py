"""One controller per sweep directory: controller.lock names the controller running it.

The lock file holds the controller's pid, host, start time and command line. It appears whole
or not at all (written under a temporary name, then hard-linked to its name, which fails if the
name exists), so a second controller either takes it or reads who holds it. A lock whose holder
ran on this host and is no longer alive (its pid is gone, or is now another process: the start
time recorded from /proc differs) is stale: it is taken over with a message. A lock from another
host cannot be checked from here and is refused like a live one; the message says how to
release it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

LOCK_NAME = "controller.lock"


class LockHeld(Exception):
    """Another controller holds the sweep; the message names it."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started_at: str  # ISO time the controller took the lock
    process_start: int | None  # /proc/<pid>/stat start time (clock ticks after boot)
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}, since {self.started_at} ({self.command})"


def process_start(pid: int) -> int | None:
    """When `pid` started, in clock ticks after boot (field 22 of /proc/<pid>/stat); None
    where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def this_controller() -> Holder:
    return Holder(
        pid=os.getpid(),
        host=socket.gethostname(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        process_start=process_start(os.getpid()),
        command=" ".join(["python -m bench.scaling", *sys.argv[1:]])[:300],
    )


def is_alive(holder: Holder) -> bool:
    """Whether the holder (on this host) still runs: its pid exists and is the same process."""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    started = process_start(holder.pid)
    return holder.process_start is None or started is None or started == holder.process_start


def read_holder(path: Path) -> Holder | None:
    """The lock's holder; None if the file is gone or unreadable."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


@dataclass
class SweepLock:
    path: Path
    holder: Holder

    def release(self) -> None:
        """Remove the lock if it is still this controller's."""
        if read_holder(self.path) == self.holder:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _try_create(path: Path, holder: Holder) -> bool:
    tmp = path.with_name(f".{path.name}.{holder.pid}.tmp")
    tmp.write_text(json.dumps(asdict(holder)))
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink()


def _take_over(path: Path, stale: Holder | None) -> bool:
    """Move a stale lock aside; False if another controller replaced it meanwhile."""
    aside = path.with_name(f".{path.name}.stale.{os.getpid()}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return True  # its holder just released it
    if read_holder(aside) != stale:  # not the lock judged stale: give it back
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        aside.unlink()
        return False
    aside.unlink()
    return True


def refusal(path: Path, holder: Holder | None) -> str:
    if holder is None:
        return f"{path} exists but cannot be read; remove it if no controller runs this sweep"
    where = "" if holder.host == socket.gethostname() else " (another host: not checked here)"
    return (
        f"{path.parent} is being run by another controller: {holder.describe()}{where}. "
        f"Wait for it to end, or stop it, then --resume again; if it is gone, remove {path}"
    )


def acquire(directory: Path, notes: list[str] | None = None) -> SweepLock:
    """Take the sweep's lock for this controller, taking over a stale one (said in `notes`);
    LockHeld when another live controller (or one on another host) holds it."""
    path, me = directory / LOCK_NAME, this_controller()
    for _ in range(5):
        if _try_create(path, me):
            return SweepLock(path, me)
        holder = read_holder(path)
        if holder is None and path.exists():
            raise LockHeld(refusal(path, None))
        if holder is not None and (holder.host != me.host or is_alive(holder)):
            raise LockHeld(refusal(path, holder))
        if _take_over(path, holder) and notes is not None and holder is not None:
            notes.append(f"took over the stale lock of {holder.describe()}: no longer running")
    raise LockHeld(f"{path}: other controllers keep taking this lock; try again")

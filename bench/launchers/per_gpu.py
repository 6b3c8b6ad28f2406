"""`python -m bench.launchers.per_gpu --gpus N --first-slot K -- COMMAND...`: the per-gpu
launcher's process on each node (its command line: bench.launchers.argv.node_argv).

It starts COMMAND once per GPU of the node, all at once, each pinned to its GPU as torchrun pins
a rank (LOCAL_RANK=i, LOCAL_WORLD_SIZE=N; bench.rank.engines sets the device) in a world of its
own (RANK=0, WORLD_SIZE=1), with its slot K+i (bench.shared.wire.SLOT_VAR). Nothing connects the
processes.
Each line one writes comes out prefixed with its slot in one write(2), so the controller gives
every GPU its own row and error. A process that fails leaves the others running; once all have
ended, the exit status is the first failure's (128 + N for a signal), or 0. The processes die
with this one (PR_SET_PDEATHSIG), and it with its launcher (bench.shared.lifeline).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import BinaryIO

from bench.shared.lifeline import die_with_parent
from bench.shared.wire import SLOT_VAR, slot_prefix

MODULE = "bench.launchers.per_gpu"


def _relay(stream: BinaryIO, prefix: bytes) -> None:
    for line in iter(stream.readline, b""):
        os.write(1, prefix + line + (b"" if line.endswith(b"\n") else b"\n"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--gpus", type=int, required=True, help="processes: this node's GPUs")
    parser.add_argument("--first-slot", type=int, default=0, help="the slot of this node's GPU 0")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the rank's command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    started = []
    for gpu in range(args.gpus):
        slot = args.first_slot + gpu
        pinned = {
            "LOCAL_RANK": str(gpu),
            "LOCAL_WORLD_SIZE": str(args.gpus),  # the GPUs' processes beside it (--cpu-affinity)
            "RANK": "0",
            "WORLD_SIZE": "1",
            SLOT_VAR: str(slot),
        }
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **pinned},
            preexec_fn=die_with_parent,
        )
        relay = threading.Thread(target=_relay, args=(proc.stdout, slot_prefix(slot).encode()))
        relay.start()
        started.append((gpu, slot, proc, relay))
    codes = []
    for gpu, slot, proc, relay in started:
        code = proc.wait()
        relay.join()
        if code:
            line = f"{slot_prefix(slot)}bench: GPU {gpu} exited with status {code}\n"
            os.write(1, line.encode())
        codes.append(code if code >= 0 else 128 - code)
    return next((c for c in codes if c), 0)


if __name__ == "__main__":
    sys.exit(main())

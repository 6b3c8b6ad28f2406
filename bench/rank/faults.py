"""Fault injection for the failure-handling tests (a test-only switch; no CLI option).

Set BENCH_INJECT_FAULT in the environment of `python -m bench.scaling` (every rank inherits
it) to make chosen ranks fail after their warm-up steps:

    BENCH_INJECT_FAULT=exit@1        rank 1 exits with status 3 (a crashed rank)
    BENCH_INJECT_FAULT=hang@0        rank 0 sleeps forever (a hung run: exercises --timeout)
    BENCH_INJECT_FAULT=oom@0         rank 0 raises torch.OutOfMemoryError (an OOM)
    BENCH_INJECT_FAULT=slow@1        rank 1 stays busy SLOW_FACTOR times each timed step's time
                                     after it (a GPU at 1/(1+SLOW_FACTOR) speed, however busy
                                     the machine)
    BENCH_INJECT_FAULT=exit@1,hang@0 several at once

A fault only fires in runs where that rank exists (exit@1 leaves 1-rank runs alone). Under the
per-gpu launcher, whose ranks are each rank 0 of their own run, the number after @ is the GPU's
slot (bench.shared.wire.SLOT_VAR): slow@1 slows the second GPU.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

ENV_VAR = "BENCH_INJECT_FAULT"
KINDS = ("exit", "hang", "oom", "slow")
EXIT_STATUS = 3
# A slowed GPU runs at a tenth of its compute speed: a fixed delay would be a different fraction
# of a step on a busy machine. The rank spins through the delay rather than sleeping: CPU ranks
# share one machine, and a sleeping rank gave the others its cores and, waking, ran ahead of them
# (Linux favours a task that slept), so its own steps took 0.4 of theirs and a factor of 9
# measured only 3.9:1 in a loaded CI run of 2026-11-28 (a factor of 3, 2:1 in an earlier one).
SLOW_FACTOR = 9.0


def parse(value: str) -> dict[int, str]:
    """ "exit@1,hang@0" -> {1: "exit", 0: "hang"}."""
    faults: dict[int, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        kind, _, rank = item.partition("@")
        if kind not in KINDS or not rank.isdigit():
            raise ValueError(f"{ENV_VAR}: expected KIND@RANK with KIND in {KINDS}, got {item!r}")
        faults[int(rank)] = kind
    return faults


def fault_for(rank: int, environ: Mapping[str, str] = os.environ) -> str | None:
    return parse(environ.get(ENV_VAR, "")).get(rank)


def trigger(kind: str | None) -> None:
    """Fail the way `kind` says; do nothing for None."""
    if kind is None:
        return
    print(f"bench: injecting fault {kind!r} ({ENV_VAR})", file=sys.stderr, flush=True)
    if kind == "slow":
        return  # `slowed` wraps the timed step
    if kind == "exit":
        os._exit(EXIT_STATUS)
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "oom":
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")


def slowed(step: Callable[..., None], kind: str | None) -> Callable[..., None]:
    """The timed step as the fault leaves it: SLOW_FACTOR times its own time longer, spent
    busy, under "slow", else `step`."""
    if kind != "slow":
        return step

    def slow_step(*args: Any) -> None:
        started = time.perf_counter()
        step(*args)
        until = started + (1 + SLOW_FACTOR) * (time.perf_counter() - started)
        while time.perf_counter() < until:  # busy, as a slow GPU's rank is
            pass

    return slow_step

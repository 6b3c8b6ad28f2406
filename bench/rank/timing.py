"""How long a run warms up and how many steps it times: framework-free, so the PyTorch rank
(bench.rank.worker) and the TensorFlow rank (bench.rank.keras_worker) follow the same rules.

Warm-up runs --warmup-steps untimed steps, then, with --timed-seconds, windows of about a
second until two consecutive windows' median step times agree within STEADY_TOLERANCE on every
rank (or --timed-seconds has passed); the timed window then lasts --timed-seconds at the
slowest rank's step time, never fewer steps than --steps. A compiling first step (torch.compile,
XLA) is timed on its own and counts as a warm-up step (`settle`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from bench.spec import Workload

STEADY_TOLERANCE = 0.02  # consecutive warm-up windows whose median step times agree this well
SETTLE_WINDOW_S = 1.0  # length of one warm-up window once the step time is known
MIN_WINDOW_STEPS = 5
LOADER_WINDOW_MAX_S = 10.0  # the loader-only window: at most this long (and >= 1 batch)


def is_steady(previous_median_s: float | None, median_s: float) -> bool:
    """Whether a warm-up window's median step time matches the previous window's."""
    if previous_median_s is None:
        return False
    return abs(median_s - previous_median_s) <= STEADY_TOLERANCE * previous_median_s


def timed_steps_for(seconds: float | None, step_s: float | None, minimum: int) -> int:
    """Steps that fill a window of `seconds` at `step_s` per step, never fewer than `minimum`
    (all of `minimum` when no duration was asked for or no step time is known)."""
    if not seconds or step_s is None or step_s <= 0:
        return minimum
    return max(minimum, math.ceil(seconds / step_s))


def settle(
    step: Callable[[], None],
    window: Callable[[int], list[float]],
    gather: Callable[[Any], list[Any]],
    load: Workload,
    compiles: bool,
    finish: Callable[[], None] = lambda: None,
    phase: Callable[[str], AbstractContextManager[Any]] = lambda _: nullcontext(),
) -> tuple[float | None, int, int]:
    """The untimed start of a run, as above: `step()` runs one step, `finish()` waits for it on
    the device, `window(n)` runs n steps and returns their times, `gather` collects every rank's
    verdict (every rank takes the same decisions, so collectives stay matched), `phase(name)`
    marks the "compile" and "warm-up" parts (NVTX ranges on a GPU). Returns (compile seconds or
    None, steps run before the window, steps to time)."""
    compile_s: float | None = None
    estimate: float | None = None  # the slowest rank's latest median step time
    if compiles:
        start = time.perf_counter()
        with phase("compile"):
            step()
            finish()
        compile_s = time.perf_counter() - start
    steps = max(load.warmup_steps, int(compiles))
    with phase("warm-up"):
        for _ in range(steps - compiles):
            step()
        deadline = time.perf_counter() + load.timed_seconds
        window_steps, previous = MIN_WINDOW_STEPS, None
        while load.timed_seconds:  # 0: --warmup-steps alone
            median = statistics.median(window(window_steps))
            steps += window_steps
            verdicts = gather((is_steady(previous, median), median, time.perf_counter() > deadline))
            estimate = max(m for _, m, _ in verdicts)
            # rank 0's clock decides for all, so every rank stops after the same window
            if all(ok for ok, _, _ in verdicts) or verdicts[0][2]:
                break
            previous = median
            window_steps = max(MIN_WINDOW_STEPS, math.ceil(SETTLE_WINDOW_S / estimate))
    return compile_s, steps, timed_steps_for(load.timed_seconds, estimate, load.timed_steps)


def loader_rate(
    next_images: Callable[[], int],
    max_batches: int,
    finish: Callable[[], None] = lambda: None,
    max_seconds: float = LOADER_WINDOW_MAX_S,
) -> float:
    """Images per second an input pipeline delivers alone (no model): up to `max_batches`
    batches (`next_images()` takes one and returns its image count) or `max_seconds`, whichever
    ends first, then `finish()` (waiting for device-side decoding and augmentation)."""
    finish()
    start = time.perf_counter()
    images = 0
    for _ in range(max(1, max_batches)):
        images += next_images()
        if time.perf_counter() - start >= max_seconds:
            break
    finish()
    return images / (time.perf_counter() - start)

"""Warm-up until the step time is steady, and a timed window that lasts --timed-seconds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bench.rank import timing, worker
from bench.spec import Workload, knobs


def test_steady_state_and_window_length() -> None:
    assert not timing.is_steady(None, 0.1)
    assert timing.is_steady(0.100, 0.1019)
    assert not timing.is_steady(0.100, 0.103)
    assert timing.timed_steps_for(None, 0.05, 8) == 8  # fixed step count
    assert timing.timed_steps_for(0.0, 0.05, 8) == 8  # --timed-seconds 0: fixed too
    assert timing.timed_steps_for(15.0, 0.035, 8) == 429  # ceil(15 / 0.035)
    assert timing.timed_steps_for(1.0, 0.5, 8) == 8  # never below the minimum
    assert timing.timed_steps_for(15.0, None, 8) == 8


class OneRank:
    """engine.gather for one process, recording what the ranks would have agreed on."""

    def __init__(self) -> None:
        self.gathered: list[Any] = []

    def gather(self, obj: Any) -> list[Any]:
        self.gathered.append(obj)
        return [obj]


def sleeping_step(seconds: float) -> tuple[list[int], Callable[[Any, Any], None]]:
    calls: list[int] = []

    def step(images: Any, labels: Any) -> None:
        calls.append(1)
        time.sleep(seconds)

    return calls, step


def endless() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    while True:
        yield torch.zeros(1), torch.zeros(1)


def cpu_workload(warmup_steps: int, timed_seconds: float, timed_steps: int = 8) -> Workload:
    """A CPU sweep's workload (each knob's default, else its CPU value) with these counts."""
    chosen = {n: k.cpu if k.default is None else k.default for n, k in knobs(Workload)}
    return dataclasses.replace(
        Workload(**chosen),
        warmup_steps=warmup_steps,
        timed_seconds=timed_seconds,
        timed_steps=timed_steps,
    )


def settle(
    step: Callable[[Any, Any], None], engine: OneRank, load: Workload, compiles: bool = False
) -> tuple[float | None, int, int]:
    """timing.settle as bench.rank.worker calls it, on CPU, over `step`."""
    batches = endless()
    return timing.settle(
        lambda: step(*next(batches)),
        lambda steps: worker.timed_window(step, batches, steps, torch.device("cpu"))[1],
        engine.gather,
        load,
        compiles,
    )


def test_fixed_warm_up_times_nothing() -> None:
    calls, step = sleeping_step(0)
    engine = OneRank()
    assert settle(step, engine, cpu_workload(4, 0.0)) == (None, 4, 8)
    assert len(calls) == 4 and engine.gathered == []


def test_a_compiling_first_step_is_timed_apart_and_counts_as_warm_up() -> None:
    calls, step = sleeping_step(0.01)
    compile_s, warmup_steps, timed_steps = settle(step, OneRank(), cpu_workload(4, 0.0), True)
    assert compile_s is not None and compile_s >= 0.01
    assert (warmup_steps, timed_steps, len(calls)) == (4, 8, 4)  # 1 compiling + 3 warm-up


def test_settling_warm_up_times_windows_and_every_rank_stops_together() -> None:
    calls, step = sleeping_step(0.002)
    engine = OneRank()
    _, steps, timed_steps = settle(step, engine, cpu_workload(2, 5.0))
    assert steps == len(calls) >= 2 + 2 * timing.MIN_WINDOW_STEPS  # two windows to compare
    # each window's verdict went through gather: (steady?, median step time, past deadline?)
    assert engine.gathered[0][0] is False  # the first window has nothing to compare with
    steady, estimate, late = engine.gathered[-1]
    assert (steady or late) and estimate >= 0.002
    assert timed_steps == timing.timed_steps_for(5.0, estimate, 8)  # 5 s at the estimate


def test_settling_stops_at_the_deadline() -> None:
    calls, step = sleeping_step(0.001)
    engine = OneRank()
    _, steps, _ = settle(step, engine, cpu_workload(0, 1e-9))
    assert steps == len(calls) == timing.MIN_WINDOW_STEPS  # one window, then out of time
    assert engine.gathered == [(False, engine.gathered[0][1], True)]

"""Warm-up until the step time is steady, and a timed window that lasts --timed-seconds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bench.rank import timing, worker


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


def test_fixed_warm_up_times_nothing() -> None:
    calls, step = sleeping_step(0)
    engine = OneRank()
    assert worker.warm_up(step, endless(), engine, torch.device("cpu"), 4, None) == (4, None)  # type: ignore[arg-type]
    assert len(calls) == 4 and engine.gathered == []


def test_settling_warm_up_times_windows_and_every_rank_stops_together() -> None:
    calls, step = sleeping_step(0.002)
    engine = OneRank()
    steps, estimate = worker.warm_up(step, endless(), engine, torch.device("cpu"), 2, 5.0)  # type: ignore[arg-type]
    assert steps == len(calls) >= 2 + 2 * timing.MIN_WINDOW_STEPS  # two windows to compare
    assert estimate is not None and estimate >= 0.002
    # each window's verdict went through gather: (steady?, median step time, past deadline?)
    assert engine.gathered[0][0] is False  # the first window has nothing to compare with
    steady, median, late = engine.gathered[-1]
    assert (steady or late) and median == estimate


def test_settling_stops_at_the_deadline() -> None:
    calls, step = sleeping_step(0.001)
    engine = OneRank()
    steps, _ = worker.warm_up(step, endless(), engine, torch.device("cpu"), 0, 0.0)  # type: ignore[arg-type]
    assert steps == len(calls) == timing.MIN_WINDOW_STEPS  # one window, then out of time
    assert engine.gathered == [(False, engine.gathered[0][1], True)]

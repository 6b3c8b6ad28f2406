"""How rank 0 hands a run's measurements to the launcher: marked lines on its stdout.

Rank 0 gathers every rank's timings through the process group and prints them as a few marked
lines of base64 JSON. Every launcher forwards rank output to the process that started it
(torchrun's ranks inherit its stdout, horovodrun prefixes and relays each line, ssh carries
both), so the result reaches the sweep from any host without a shared filesystem. Each line is
shorter than PIPE_BUF and written with one write(2), so lines from other ranks or from NCCL
cannot tear it; the chunks are numbered, so a missing one is detected instead of misread.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MARKER = "@@bench-result"
CHUNK_CHARS = 2048  # well under PIPE_BUF (4096) with the marker and ids
# The per-gpu launcher's ranks are each a run of world size 1 on one GPU. Each one's slot (its
# GPU's place in the launch's placement, node by node: node 0's GPUs first) comes in this
# variable; it keys the rank's result (`result_id`) and prefixes each line of its output
# (`slot_prefix`, written by bench.launchers.per_gpu), so every GPU gets its own row and error.
SLOT_VAR = "BENCH_GPU_SLOT"


def result_id(run_id: str, slot: int | None = None) -> str:
    """The id a rank's result is marked with: the run's, or one GPU's of a per-gpu launch."""
    return run_id if slot is None else f"{run_id}.gpu{slot}"


def slot_prefix(slot: int) -> str:
    return f"[slot {slot}] "


def slot_output(text: str, slot: int) -> str:
    """The lines one slot's rank wrote, without their prefix."""
    prefix = slot_prefix(slot)
    return "".join(
        line.removeprefix(prefix)
        for line in text.splitlines(keepends=True)
        if line.startswith(prefix)
    )


@dataclass(frozen=True)
class RankReport:
    """One rank's measurements of the timed window."""

    rank: int
    local_rank: int
    host: str
    device_name: str
    window_s: float
    step_s: list[float]  # per timed step, end of step to end of step
    data_wait_s: float  # time blocked waiting for the next input batch
    peak_memory_bytes: int | None
    telemetry: dict[str, Any] = field(default_factory=dict)  # telemetry.summarise_samples
    compile_s: float | None = None  # the first step, which compiled the model (--compile on)
    warmup_steps: int | None = None  # untimed steps actually run (warm-up until steady)
    loader_images_per_s: float | None = None  # real data: the loader alone, after the window
    profile: dict[str, Any] | None = None  # --profile: profiling.profile_steps' summary (rank 0)
    # where the rank ran, as it saw it (`runtime`): interpreter, framework, mount namespace
    runtime: dict[str, str] = field(default_factory=dict)
    cpu_cores: int | None = None  # cores its CPU affinity allowed after the window (--cpu-affinity)


@dataclass(frozen=True)
class RunReport:
    """What rank 0 sends for a run: every rank's report plus facts about the run."""

    run_id: str
    backend: str
    world_size: int
    gradient_bytes: int
    images_per_rank: int
    ranks: list[RankReport] = field(default_factory=list)  # every rank's (`send` adds them)
    timed_steps: int | None = None  # steps in the timed window (fills --timed-seconds)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunReport:
        fields = dict(data)
        fields["ranks"] = [RankReport(**r) for r in data["ranks"]]
        return cls(**fields)


def send(
    gather: Callable[[Any], list[Any]],
    report: RankReport,
    run: RunReport,
    *,
    first: bool,
    slot: int | None = None,
) -> None:
    """Every rank's `report` to the first rank, which prints `run` with all of them for the
    launcher (marked with `result_id(run.run_id, slot)`). gather: the ranks' all-gather; it
    carries each report as a dict (TensorFlow's goes through JSON)."""
    reports = [RankReport(**r) for r in gather(dataclasses.asdict(report))]
    if first:
        emit(
            result_id(run.run_id, slot), dataclasses.asdict(dataclasses.replace(run, ranks=reports))
        )


def encode(run_id: str, payload: dict[str, Any], chunk_chars: int = CHUNK_CHARS) -> list[str]:
    data = base64.b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")
    chunks = [data[i : i + chunk_chars] for i in range(0, len(data), chunk_chars)] or [""]
    return [f"{MARKER} {run_id} {i + 1}/{len(chunks)} {c}" for i, c in enumerate(chunks)]


def emit(run_id: str, payload: dict[str, Any], fd: int = 1) -> None:
    for line in encode(run_id, payload):
        os.write(fd, (line + "\n").encode("ascii"))


def decode(run_id: str, text: str) -> dict[str, Any] | None:
    """The payload for `run_id` in a launcher's output, or None if absent or incomplete."""
    pattern = re.compile(rf"{re.escape(MARKER)} {re.escape(run_id)} (\d+)/(\d+) ([A-Za-z0-9+/=]*)")
    chunks: dict[int, str] = {}
    total = None
    for match in pattern.finditer(text):
        index, count, data = int(match[1]), int(match[2]), match[3]
        if total is not None and count != total:
            return None
        total = count
        chunks[index] = data
    if total is None or sorted(chunks) != list(range(1, total + 1)):
        return None
    try:
        return json.loads(base64.b64decode("".join(chunks[i] for i in range(1, total + 1))))
    except ValueError:
        return None


def runtime(**framework: str) -> dict[str, str]:
    """Where this rank runs, as it sees it: its interpreter, its framework's fields (version and
    path) and its mount namespace (a container has its own), so a row shows the environment that
    really ran (--container)."""
    try:
        mounts = os.readlink("/proc/self/ns/mnt")
    except OSError:
        mounts = ""
    return {"python": sys.executable, **framework, "mount_namespace": mounts}

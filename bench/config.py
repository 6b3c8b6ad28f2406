"""A sweep's configuration: `BenchConfig` (how the sweep runs, its knobs declared as in
bench.spec), the `Request` bench.options parses (None where nothing was typed; bench.admission
checks it, bench.machine_defaults.resolve fills the gaps) and the error that refuses one.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.hosts import ClusterConfig
from bench.launcher_kinds import DEFAULT_LAUNCHERS, LAUNCHER_KINDS, LAUNCHERS, NOT_BUILT
from bench.spec import ImageKnobs, Knob, Variant, Workload, knob, knobs

IMAGENET_TRAIN_IMAGES = 1_281_167


class ConfigError(Exception):
    """An impossible request; the message lists every problem found."""


def _claim(text: str) -> tuple[tuple[int, float], ...]:
    """ "1:560,4:148" -> ((1, 560.0), (4, 148.0)): claimed seconds per epoch by GPU count."""
    pairs = []
    for item in text.split(","):
        try:
            n, seconds = item.split(":")
            pairs.append((int(n), float(seconds)))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected GPUS:SECONDS[,GPUS:SECONDS...], got {item!r}"
            ) from None
    return tuple(pairs)


def _launchers_help() -> str:
    named = [f"{k.name} ({k.description})" for k in LAUNCHER_KINDS.values()]
    return f"comma list of {', '.join(named[:-1])} and {named[-1]}"


@dataclass(frozen=True)
class BenchConfig(ImageKnobs):
    """A complete, validated sweep description (saved in sweep.jsonl; --resume reloads it):
    how the sweep runs (the knobs below, and how its images run: `ImageKnobs`), what every run
    trains (`workload`) and the values of each swept axis (`axes`: a Variant field -> its
    values, in order)."""

    gpu_counts: tuple[int, ...] = knob(
        "--gpus",
        "GPU (rank) counts to sweep, comma list",
        parse=int,
        many=True,
        at_least=1,
        words="1,2,4,... up to all visible GPUs; 1,2 on CPU",
    )
    launchers: tuple[str, ...] = knob(
        "--launchers",
        _launchers_help(),
        values={x: x for x in LAUNCHERS},
        refused=NOT_BUILT,
        many=True,
        words=",".join(DEFAULT_LAUNCHERS) + "; with Horovod missing its rows are marked "
        "unavailable",
    )
    batch_size: int = knob(
        "--batch-size",
        "per-GPU batch of one forward/backward pass (a micro-batch under "
        "--grad-accum): weak scaling",
        parse=int,
        at_least=1,
        words="by GPU memory (bench.gpu_defaults): 256 from 38 GB, 128 from 15 GB, else 64; "
        "128 on a GPU it does not know; 8 on CPU",
    )
    global_batch: int | None = knob(
        "--global-batch",
        "fixed global batch (images per optimizer step) split over the GPUs "
        "and --grad-accum micro-batches: strong scaling (instead of --batch-size)",
        parse=int,
        at_least=1,
        words="none, weak scaling",
    )
    # At most 1000: every launch is a row the controller keeps (100000000 grew it past 5 GB).
    repeats: int = knob(
        "--repeats", "launches per configuration", parse=int, default=3, at_least=1, at_most=1000
    )
    timeout_s: float = knob(
        "--timeout", "seconds before a run is killed", parse=float, gpu=1200.0, cpu=300.0, above=0
    )
    allreduce_probe: bool = knob(
        "--no-probe",
        "skip the allreduce bandwidth probe",
        default=True,
        switch=True,
        words="the probe runs",
    )
    probe_mb: float = knob(
        "--probe-mb",
        "allreduce probe size in MB (ResNet-50's fp32 gradients are ~102 MB)",
        parse=float,
        default=100.0,
        above=0,
    )
    nccl_tests: str = knob(
        "--nccl-tests",
        "NVIDIA's all_reduce_perf (the file or its directory) run beside each "
        "single-node GPU probe at the same size; 'off' to skip",
        default="",
        words="all_reduce_perf on PATH, else the newest under /opt/nccl-tests (the nccl_tests "
        "role's), if any",
    )
    probe_iterations: int = knob(
        "--probe-iterations", "timed allreduces", parse=int, gpu=20, cpu=5, at_least=1
    )
    dataset_size: int = knob(
        "--dataset-size",
        "images per epoch for the epoch-time projection",
        parse=int,
        default=IMAGENET_TRAIN_IMAGES,
        at_least=1,
        words="1281167, ImageNet-1k train",
    )
    claim: tuple[tuple[int, float], ...] = knob(
        "--claim",
        "claimed epoch seconds to check, GPUS:SECONDS pairs, e.g. 1:560,4:148",
        parse=_claim,
        default=(),
        words="none",
    )
    out_root: str = knob(
        "--out", "results root; each sweep makes a directory in it", default="results"
    )
    workload: Workload
    axes: dict[str, tuple[Any, ...]]
    launchers_explicit: bool = False
    cluster: ClusterConfig | None = None  # multi-node: --hosts/--hostfile/--slurm
    slow_gpu_threshold: float = knob(
        "--slow-gpu-threshold",
        "the per-gpu check (--launchers per-gpu) flags a GPU whose img/s is more than this many "
        "percent below its node's median or the published figure for its model",
        parse=float,
        default=10.0,
        at_least=0,
        optional=True,
    )

    @property
    def device(self) -> str:
        return self.workload.device

    def variants(self) -> list[Variant]:
        """Every combination of the swept axes, the first axis outermost."""
        combos = itertools.product(*self.axes.values())
        return [Variant(**dict(zip(self.axes, combo, strict=True))) for combo in combos]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        fields = dict(data)
        fields["claim"] = tuple((int(n), float(s)) for n, s in fields["claim"])
        for name in (name for name, k in knobs(cls) if k.many):  # --gpus, --launchers, ...
            fields[name] = tuple(fields[name])
        fields["workload"] = Workload(**fields["workload"])
        fields["axes"] = {name: tuple(values) for name, values in fields["axes"].items()}
        cluster = fields.get("cluster")
        fields["cluster"] = ClusterConfig.from_dict(cluster) if cluster else None
        return cls(**fields)


KNOB_CLASSES = (BenchConfig, Variant, Workload)


def all_knobs() -> Iterator[tuple[str, Knob]]:
    for cls in KNOB_CLASSES:
        yield from knobs(cls)


@dataclass(frozen=True)
class Request:
    """Parsed argv: each knob's value, None where the machine's default applies."""

    values: dict[str, Any]
    resume: Path | None = None
    progress: bool = True
    cluster: ClusterConfig | None = None


def refuse(errors: Sequence[str]) -> None:
    """Raise ConfigError listing `errors`, in order (nothing when there are none)."""
    if errors:
        raise ConfigError("\n".join(f"  - {e}" for e in errors))

"""A sweep's configuration: its knobs and validation.

Every option of a sweep is a `Knob` declared once on a field of `BenchConfig` (how the sweep
runs), `bench.spec.Variant` (the swept axes) or `bench.spec.Workload` (what every run trains);
bench.options generates the parser from them and gives a `Request` (None where nothing was
typed). `check_values` refuses impossible values before any heavy import; `resolve`
(bench.machine_defaults) fills the gaps from the detected `Environment` (GPU or CPU defaults);
`validate` lists every request this machine cannot serve at once, so a sweep never launches only
to fail on its fifth configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.hosts import ClusterConfig, Environment
from bench.launcher_kinds import (
    DEFAULT_LAUNCHERS,
    LAUNCHER_KINDS,
    LAUNCHERS,
    NOT_BUILT,
    PER_GPU,
    TENSORFLOW_PACKAGE,
    LauncherKind,
    launcher_kind,
)
from bench.loader_support import loader_errors
from bench.preflight import cluster_problems, conflicts, nccl_tests_problem, out_problem
from bench.spec import (
    SYNTHETIC,
    ImageKnobs,
    Knob,
    Variant,
    Workload,
    knob,
    knobs,
    runs_on_host,
)

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
        combos: list[dict[str, Any]] = [{}]
        for name, values in self.axes.items():
            combos = [{**c, name: v} for c in combos for v in values]
        return [Variant(**c) for c in combos]

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


# --------------------------------------------------------------------------------------------
# Checks that need no machine: run right after parsing, before anything heavy is imported


def check_values(values: Mapping[str, Any]) -> list[str]:
    """Every value out of its knob's range (None values are not given and not checked)."""
    errors = []
    for name, k in all_knobs():
        value = values.get(name)
        if value is None:
            continue
        items = value if k.many else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            errors.append(f"{k.flag} must be a finite number, got {_shown(value)}")
            continue
        if k.at_least is not None and any(v < k.at_least for v in items):
            errors.append(f"{k.flag} must be >= {k.at_least:g}, got {_shown(value)}")
        if k.above is not None and any(v <= k.above for v in items):
            errors.append(f"{k.flag} must be > {k.above:g}, got {_shown(value)}")
        if k.at_most is not None and any(v > k.at_most for v in items):
            errors.append(f"{k.flag} must be <= {k.at_most:g}, got {_shown(value)}")
    if values.get("out_root") is not None and not str(values["out_root"]).strip():
        errors.append('--out must name a directory, got ""')
    if any(n < 1 or s <= 0 for n, s in values.get("claim") or ()):
        errors.append("--claim: GPUs >= 1 and seconds > 0")
    data = values.get("data")
    if data not in (None, SYNTHETIC):
        root = Path(data)
        if not root.is_dir():
            errors.append(f"--data: {root} is not a directory (ImageFolder root expected)")
        elif not any(p.is_dir() for p in root.iterdir()):
            errors.append(f"--data: {root} has no class subdirectories (ImageFolder layout)")
    return errors


def _shown(value: Any) -> str:
    items = value if isinstance(value, tuple) else (value,)
    return ",".join(str(v) if isinstance(v, int) else f"{v:g}" for v in items)


def unused_options(values: Mapping[str, Any]) -> list[str]:
    """Options given where nothing would read them (as typed: a resolved config has defaults)."""
    if values.get("slow_gpu_threshold") is not None and PER_GPU.name not in (
        values.get("launchers") or ()
    ):
        return [
            f"--slow-gpu-threshold applies to --launchers {PER_GPU.name} only (the per-GPU "
            "check), which this sweep does not run"
        ]
    return []


def request_problems(request: Request) -> list[str]:
    """Values no machine could run, flags that contradict each other and options nothing would
    read, as typed (validate lists them with the machine's problems)."""
    return check_values(request.values) + conflicts(request.values) + unused_options(request.values)


# --------------------------------------------------------------------------------------------
# Checks against the machine


def horovod_problem(env: Environment, device: str) -> str:
    """Why Horovod cannot run this sweep, or "" if it can."""
    if not env.horovod.available:
        return env.horovod.reason or "Horovod is not installed"
    if device == "cuda" and env.horovod.nccl_built is False:
        return (
            f"Horovod {env.horovod.version} was built without NCCL: GPU allreduce would go "
            "through host memory (about half the per-GPU throughput, horovod#2686); rebuild "
            "with HOROVOD_GPU_OPERATIONS=NCCL"
        )
    return ""


def launcher_problem(kind: LauncherKind, env: Environment, device: str) -> str:
    """Why a launcher cannot run in this environment, or "" if it can: a package it needs."""
    if kind.needs_horovod:
        return horovod_problem(env, device)
    if kind.framework == TENSORFLOW_PACKAGE and not env.tensorflow:
        return (
            "TensorFlow is not installed in this environment (the python_env role adds it when "
            "asked: roles/python_env/README.md)"
        )
    return ""


def _capacity_problems(config: BenchConfig, env: Environment) -> list[str]:
    errors = []
    gpu = config.device == "cuda"
    # With --hosts or --slurm, env describes the smallest node (bench.launchers.cluster).
    if gpu and env.gpu_count == 0:
        errors.append("--device cuda: no CUDA GPU is visible")
    limit = env.gpu_count if gpu else env.cores
    unit = "GPUs" if gpu else "CPU ranks (one core each at least)"
    if config.cluster is None and max(config.gpu_counts) > limit:
        errors.append(
            f"--gpus: {max(config.gpu_counts)} requested but this machine has {limit} {unit}"
        )
    if config.cluster is not None and max(config.cluster.gpus_per_node) > limit:
        errors.append(
            f"--gpus-per-node: {max(config.cluster.gpus_per_node)} requested but the smallest "
            f"node has {limit} {unit}"
        )
    if config.global_batch is not None:
        for accum in sorted({v.grad_accum for v in config.variants()} - {0}):
            uneven = [n for n in config.gpu_counts if n and config.global_batch % (n * accum)]
            if uneven:
                over = f"{uneven} GPUs" + (f" x {accum} micro-batches" if accum > 1 else "")
                errors.append(
                    f"--global-batch {config.global_batch} does not split evenly over {over}"
                )
    return errors


def _feature_problems(config: BenchConfig, env: Environment, models: Sequence[str]) -> list[str]:
    errors = []
    gpu = config.device == "cuda"
    model = config.workload.model
    if model not in models:
        close = difflib.get_close_matches(model, models, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        errors.append(f"--model: unknown torchvision classification model {model!r}{hint}")
    precisions = config.axes["precision"]
    if "tf32" in precisions and not (gpu and env.tf32_supported):
        errors.append("--precision tf32 needs an NVIDIA Ampere or newer GPU")
    if "amp-bf16" in precisions and gpu and not env.bf16_supported:
        errors.append(f"--precision amp-bf16: {env.gpu_name} has no bfloat16 support")
    explicit_here = config.launchers_explicit and runs_on_host(config.axes)
    for name in config.launchers:
        kind = launcher_kind(name)
        problem = launcher_problem(kind, env, config.device) if explicit_here else ""
        if problem:
            errors.append(f"--launchers {name}: {problem}")
        if not kind.multi_node and config.cluster is not None:
            errors.append(
                f"--launchers {name}: {kind.title} runs on one machine only; it cannot span nodes "
                f"(--hosts/--hostfile/--slurm). Sweep {name} on one node"
            )
    errors += loader_errors(
        config.axes["loader"], config.workload.data, config.device, launchers=config.launchers
    )
    return errors


def problems(config: BenchConfig, env: Environment, models: Sequence[str]) -> list[str]:
    """Every impossible request in `config` on this machine: values, paths, ports and tools
    (bench.preflight), capacity, features."""
    # every knob's value in the resolved configuration, by field name
    values = {name: getattr(config, name) for name, _ in knobs(BenchConfig)}
    errors = check_values({**values, **config.axes, **dataclasses.asdict(config.workload)})
    errors += [
        e for e in (out_problem(config.out_root), nccl_tests_problem(config.nccl_tests)) if e
    ]
    errors += cluster_problems(config.cluster)
    return errors + _capacity_problems(config, env) + _feature_problems(config, env, models)


def refuse(errors: Sequence[str]) -> None:
    """Raise ConfigError listing `errors` once each, in order (nothing when there are none)."""
    if errors:
        raise ConfigError("\n".join(f"  - {e}" for e in dict.fromkeys(errors)))


def validate(
    config: BenchConfig, env: Environment, models: Sequence[str], earlier: Sequence[str] = ()
) -> None:
    """Raise ConfigError listing `earlier` problems and every impossible request in `config`
    on this machine, in one message."""
    refuse([*earlier, *problems(config, env, models)])
